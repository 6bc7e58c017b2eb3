# A real Prometheus scrapes mailer's /metrics (issue 15, item 4): a Kafka
# job runs with records flowing, and Prometheus's own query API answers a
# positive rate(mailer_records_in_total{job="<name>"}[10s]); the target is
# up.  The exposition itself passes `promtool check metrics`, has the
# families the issue names with a job label, its histograms are cumulative
# (buckets non-decreasing, +Inf = _count), and the checkpoint duration
# histogram counts the checkpoints as they commit.
#
# The scrape config sets honor_labels: the series carry a `job` label of
# their own (the mailer job), which Prometheus would otherwise rename to
# exported_job in favour of the scrape job's name.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use MailerTest;
use MailerHttp;
use File::Temp qw(tempdir);
use IPC::Run ();
use JSON::PP ();
use POSIX ();
use Test::More;
use Time::HiRes qw(sleep);

my $port = http_port();
my $topic = fresh_topic('t140', 2);
my $job = 'j140';

# Children of this test, stopped however it ends.
my %children;
END
{
	my $status = $?;
	for my $pid (keys %children)
	{
		kill 'TERM', $pid;
		waitpid $pid, 0;
	}
	$? = $status;
}

# Records keep flowing: a producer sends 20 records every 200 ms until
# the test ends (the rate over 10 s must see the counter move).
my $producer = fork // die "fork: $!\n";
if ($producer == 0)
{
	my $seq = 0;
	while (getppid() > 1)
	{
		eval { kcat_produce($topic, [ map { 'k' . ($_ % 5) . "\t{\"seq\": $_}" } $seq + 1 .. $seq + 20 ]) };
		$seq += 20;
		sleep 0.2;
	}
	POSIX::_exit(0);
}
$children{$producer} = 1;

# Event time from the Kafka timestamp, so the job has a watermark (and
# mailer_watermark_delay_seconds a sample), and 1 s tumbling counts.
psql("CREATE TABLE t140_counts (k text, window_start timestamptz, window_end timestamptz, n bigint, PRIMARY KEY (k, window_start))");
psql(qq{SELECT mailer.create_job('$job', \$\${"source": {"type": "kafka", "brokers": "$BROKERS", "topic": "$topic"},
	"event_time": "timestamp",
	"watermark": {"max_out_of_orderness": "1 second"},
	"steps": [{"key_by": {"k": "key"}}, {"window": {"type": "tumbling", "size": "1 second"}},
	          {"aggregate": {"n": "count(*)"}}],
	"sink": {"type": "table", "table": "t140_counts"},
	"checkpoint": {"interval": "300 milliseconds"}}\$\$)});
wait_until("$job reads records", sub { job_metrics($job)->{records_in} > 0 }, 60);

# ---------------------------------------------------------------------------
# Prometheus, in a directory of the test's own
# ---------------------------------------------------------------------------

my $dir = tempdir('t140_prometheus_XXXX', TMPDIR => 1, CLEANUP => 1);
my $prom_port = free_port();
open my $cfg, '>', "$dir/prometheus.yml" or die "$dir/prometheus.yml: $!\n";
print $cfg <<YAML;
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: mailer
    honor_labels: true
    metrics_path: /metrics
    static_configs:
      - targets: ['127.0.0.1:$port']
YAML
close $cfg;
my $prom = fork // die "fork: $!\n";
if ($prom == 0)
{
	open STDOUT, '>', "$dir/prometheus.log" or POSIX::_exit(1);
	open STDERR, '>&', \*STDOUT or POSIX::_exit(1);
	exec 'prometheus', "--config.file=$dir/prometheus.yml", "--storage.tsdb.path=$dir/data",
	  "--web.listen-address=127.0.0.1:$prom_port"
	  or POSIX::_exit(1);
}
$children{$prom} = 1;

sub prom_log
{
	open my $fh, '<', "$dir/prometheus.log" or return '';
	local $/;
	my $text = <$fh> // '';
	return join("\n", (split /\n/, $text)[-20 .. -1]);
}

# Prometheus's HTTP API: the decoded answer of a GET.
sub prom_api
{
	my ($path) = @_;
	my $r = HTTP::Tiny->new(timeout => 5)->get("http://127.0.0.1:$prom_port$path");
	die "Prometheus $path: $r->{status}\n" unless $r->{status} == 200;
	return JSON::PP::decode_json($r->{content});
}

my $target;
eval {
	wait_until('Prometheus scrapes the endpoint: target health up', sub {
		my $t = prom_api('/api/v1/targets')->{data}{activeTargets};
		$target = $t->[0] if $t && @$t;
		return $target && $target->{health} eq 'up';
	}, 90);
	1;
} or diag("last target: " . JSON::PP->new->canonical->encode($target // {}) . "\nPrometheus log:\n" . prom_log());
is($target && $target->{health}, 'up', 'Prometheus: the mailer target is up');
is($target && $target->{scrapeUrl}, "http://127.0.0.1:$port/metrics", '... scraped at /metrics');

my $query = "rate(mailer_records_in_total{job=\"$job\"}[10s])";
(my $q = $query) =~ s/([^A-Za-z0-9_.~-])/sprintf('%%%02X', ord $1)/ge;
my $rate;
eval {
	wait_until("Prometheus answers a positive $query", sub {
		my $res = prom_api("/api/v1/query?query=$q")->{data}{result};
		$rate = $res && @$res ? $res->[0]{value}[1] : undef;
		return defined $rate && $rate > 0;
	}, 90);
	1;
} or diag("last answer: " . ($rate // 'no series') . "\nPrometheus log:\n" . prom_log());
cmp_ok($rate // 0, '>', 0, "Prometheus: $query is positive (" . ($rate // 'none') . ')');

my $up = prom_api('/api/v1/query?query=' . "mailer_job_up%7Bjob%3D%22$job%22%7D")->{data}{result};
is($up && @$up ? $up->[0]{value}[1] : undef, '1', 'Prometheus: mailer_job_up of the job is 1');

# ---------------------------------------------------------------------------
# The exposition, scraped directly
# ---------------------------------------------------------------------------

my $r = http_get('/metrics');
is($r->{status}, 200, 'GET /metrics: 200');
like($r->{headers}{'content-type'}, qr{^text/plain; version=0\.0\.4}, 'the Prometheus text format content type');
my $text = $r->{content};

my ($out, $err) = ('', '');
my $ok = IPC::Run::run([ 'promtool', 'check', 'metrics' ], '<', \$text, '>', \$out, '2>', \$err);
ok($ok, 'promtool check metrics finds no problem') or diag("$out$err");

my $m = parse_metrics($text);
my %want = (
	mailer_records_in_total => 'counter',
	mailer_records_out_total => 'counter',
	mailer_records_dead_lettered_total => 'counter',
	mailer_records_late_total => 'counter',
	mailer_job_restarts_total => 'counter',
	mailer_job_up => 'gauge',
	mailer_consumer_lag => 'gauge',
	mailer_watermark_delay_seconds => 'gauge',
	mailer_state_bytes => 'gauge',
	mailer_checkpoint_duration_seconds => 'histogram',
	mailer_produce_to_commit_latency_seconds => 'histogram',
);
for my $family (sort keys %want)
{
	is($m->{type}{$family}, $want{$family}, "$family is a $want{$family}");
	ok($m->{help}{$family}, "$family has a HELP line");
	my $sample = $want{$family} eq 'histogram' ? "${family}_count" : $family;
	ok(defined metric_value($m, $sample, job => $job), "$sample has a sample with job=\"$job\"");
}
my $partitions = grep { $_->{name} eq 'mailer_partition_records_in_total' && ($_->{labels}{job} // '') eq $job } @{ $m->{samples} };
is($partitions, 2, 'mailer_partition_records_in_total: one series per partition of the job');

# Histograms: per series (labels without le), the buckets by le are
# cumulative: non-decreasing, the last is +Inf and equals _count.
sub check_histograms
{
	my ($m, $family) = @_;
	my (%buckets, %count, %sum);
	for my $s (@{ $m->{samples} })
	{
		my %l = %{ $s->{labels} };
		my $le = delete $l{le};
		my $key = join(',', map { "$_=$l{$_}" } sort keys %l);
		if ($s->{name} eq "${family}_bucket")
		{
			push @{ $buckets{$key} }, [ $le eq '+Inf' ? 9**9**9 : $le, $s->{value}, $le ];
		}
		$count{$key} = $s->{value} if $s->{name} eq "${family}_count";
		$sum{$key} = $s->{value} if $s->{name} eq "${family}_sum";
	}
	my @problems;
	for my $key (sort keys %count)
	{
		my @b = sort { $a->[0] <=> $b->[0] } @{ $buckets{$key} // [] };
		push @problems, "$key: no buckets" unless @b;
		next unless @b;
		push @problems, "$key: the last bucket is le=\"$b[-1][2]\", not +Inf" unless $b[-1][2] eq '+Inf';
		push @problems, "$key: +Inf bucket $b[-1][1] != _count $count{$key}" unless $b[-1][1] == $count{$key};
		for my $i (1 .. $#b)
		{
			push @problems, "$key: bucket le=$b[$i][2] ($b[$i][1]) < le=$b[$i-1][2] ($b[$i-1][1])"
			  if $b[$i][1] < $b[ $i - 1 ][1];
		}
		push @problems, "$key: no _sum" unless defined $sum{$key} && $sum{$key} >= 0;
	}
	is(join("\n", @problems), '', "$family: every series cumulative, +Inf = _count, a _sum")
	  and ok(scalar(keys %count), "$family: has series");
}
check_histograms($m, 'mailer_checkpoint_duration_seconds');
check_histograms($m, 'mailer_produce_to_commit_latency_seconds');

# The checkpoint histogram counts checkpoints as they commit.
my $count0 = metric_value($m, 'mailer_checkpoint_duration_seconds_count', job => $job) // 0;
my $count1;
wait_until('mailer_checkpoint_duration_seconds_count grows', sub {
	$count1 = metric_value(parse_metrics(http_get('/metrics')->{content}),
		'mailer_checkpoint_duration_seconds_count', job => $job);
	return defined $count1 && $count1 > $count0;
}, 60);
cmp_ok($count1, '>', $count0, "mailer_checkpoint_duration_seconds_count grows ($count0 -> $count1)");
wait_until('records with a Kafka timestamp are counted in the produce-to-commit histogram', sub {
	(metric_value(parse_metrics(http_get('/metrics')->{content}),
		'mailer_produce_to_commit_latency_seconds_count', job => $job) // 0) > 0;
}, 60);
pass('mailer_produce_to_commit_latency_seconds_count counts committed records');

psql("SELECT mailer.drop_job('$job')");
my $gone = parse_metrics(http_get('/metrics')->{content});
ok(!defined metric_value($gone, 'mailer_records_in_total', job => $job), 'a dropped job has no series');
done_testing();
