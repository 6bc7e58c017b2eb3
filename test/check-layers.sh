#!/usr/bin/env bash
# test/check-layers.sh: check that src/ keeps its layering.
#
# The folders of src/ are layers, bottom to top (LAYERS below: the one place
# the order is written down; docs/ARCHITECTURE.md, "Folder map and
# layering", explains it).  A file directly in src/ (mailer.c) is above them
# all.  The script fails, naming each offending line, when
#
#   - a file includes a header of a folder above its own (#include "x/y.h");
#   - a .c file uses a function or variable that a .c file of a folder above
#     its own defines (through whatever header declares it), or a header
#     declares one: a header offers only what its own folder or a lower one
#     defines;
#   - files depend on each other in a cycle: a header cycle of #include, or
#     .c files that use each other's functions and variables, directly or
#     around a loop.  ALLOWED_PAIRS lists the pairs allowed, each with why;
#   - a project header is included without its folder ("spec.h" for
#     "plan/spec.h"), or a folder of src/ is missing from LAYERS.
#
# The settings are the one exception: their variables are defined beside
# _PG_init (src/mailer.c) and declared in base/mailer.h, and any layer may
# read them.
#
# Usage: test/check-layers.sh [-v] [source root, default: the repository's src]
#   -v  also list every file dependency.
# Exit status: 0 when the layering holds, 1 on a violation, 2 on a usage error.
# Needs only perl, which PostgreSQL's build and TAP tests need anyway.
exec perl -x "$0" "$@"
#!perl
use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Find;

# The layers of src/, bottom to top.  A folder may include and use only its
# own files and those of the folders before it in this list.
my @LAYERS = qw(base plan jobs state connectors operators runtime api http);

# Pairs of files allowed to depend on each other, with the reason.  Keep it
# short: a pair belongs here only when splitting it would just hide the
# cycle (behind callbacks, say), not remove it.
my %ALLOWED_PAIRS = (
);

my $verbose = 0;
if (@ARGV && $ARGV[0] eq '-v')
{
	$verbose = 1;
	shift @ARGV;
}
my $root = dirname(dirname(abs_path(__FILE__)));
my $src = @ARGV ? $ARGV[0] : "$root/src";
$src =~ s{/+$}{};
if (@ARGV > 1 || !-d $src)
{
	print STDERR "usage: test/check-layers.sh [-v] [source root]\n";
	exit 2;
}

my $TOP = scalar @LAYERS;              # the layer of files directly in src/
my %layer_of = map { $LAYERS[$_] => $_ } 0 .. $#LAYERS;
my @violations;

sub layer_name { my ($l) = @_; return $l == $TOP ? 'src/' : $LAYERS[$l]; }

# The files, relative to the repository: "src/plan/spec.c".
my @files;
find(
	{
		no_chdir => 1,
		wanted => sub { push @files, $File::Find::name if /\.[ch]$/ && -f $_; }
	},
	$src);
@files = sort map { s{^\Q$src\E/}{src/}r } @files;
my %is_file = map { $_ => 1 } @files;
sub disk { my ($f) = @_; return $f =~ s{^src/}{$src/}r; }

# Layer of a file: its first folder under src/, or the top for src/x.c.
my %unknown_folder;
sub layer_of_file
{
	my ($f) = @_;
	return $TOP if $f =~ m{^src/[^/]+$};
	my ($folder) = $f =~ m{^src/([^/]+)/};
	return $layer_of{$folder} if exists $layer_of{$folder};
	$unknown_folder{$folder} = 1;
	return -1;
}

sub read_file
{
	my ($f) = @_;
	open my $fh, '<', disk($f) or die "check-layers: cannot read $f: $!\n";
	local $/;
	my $text = <$fh>;
	close $fh;
	return $text;
}

# Comments become blanks (newlines kept, so line numbers hold); with
# $strings, string and character literals become empty too.
sub strip
{
	my ($text, $strings) = @_;
	$text =~ s{(/\*.*?\*/|//[^\n]*)|("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')}
			  {defined $1 ? ($1 =~ tr/\n//cdr) : ($strings ? '""' : $2)}gse;
	return $text;
}

my (%stripped, %code);
for my $f (@files)
{
	my $text = read_file($f);
	$stripped{$f} = strip($text, 0);
	$code{$f} = strip($text, 1);
}

# Graph of files: edges{from}{to} = [why, ...]
my %edges;
sub add_edge
{
	my ($from, $to, $why) = @_;
	push @{ $edges{$from}{$to} }, $why;
}

# 1. Includes.
my $nincludes = 0;
my %folder_edges;
for my $f (@files)
{
	my $line = 0;
	for (split /\n/, $stripped{$f}, -1)
	{
		$line++;
		next unless /^\s*#\s*include\s*"([^"]+)"/;
		my $inc = $1;
		my $target;
		if ($is_file{"src/$inc"})
		{
			$target = "src/$inc";
		}
		elsif ($is_file{ dirname($f) . "/$inc" })
		{
			push @violations,
			  "$f:$line: #include \"$inc\" is not folder-qualified: write "
			  . "\"" . (dirname($f) =~ s{^src/}{}r) . "/$inc\" (-I src)";
			$target = dirname($f) . "/$inc";
		}
		elsif ($inc =~ m{^([^/]+)/} && exists $layer_of{$1})
		{
			push @violations, "$f:$line: #include \"$inc\": no such file in src/";
			next;
		}
		else
		{
			next;    # PostgreSQL's or a library's header
		}
		$nincludes++;
		add_edge($f, $target, "#include \"$inc\" (line $line)");
		my ($lf, $lt) = (layer_of_file($f), layer_of_file($target));
		next if $lf < 0 || $lt < 0;
		$folder_edges{ layer_name($lf) }{ layer_name($lt) } = 1 if $lf != $lt;
		if ($lt > $lf)
		{
			push @violations,
			  "$f:$line: #include \"$inc\": " . layer_name($lf)
			  . " may not include " . layer_name($lt)
			  . ", a folder above it";
		}
	}
}

# 2. Which .c file defines each function and variable that a header declares.
my %declared;    # symbol -> header that declares it extern
for my $h (grep { /\.h$/ } @files)
{
	my $text = $code{$h};
	while ($text =~ /\bextern\b([^;{}]*);/g)
	{
		my $decl = $1;
		my $name;
		if ($decl =~ /\(\s*\*\s*(\w+)\s*\)\s*\(/)
		{
			$name = $1;    # a function pointer variable
		}
		elsif ($decl =~ /(\w+)\s*\(/)
		{
			$name = $1;    # a function
		}
		elsif ($decl =~ /(\w+)\s*(?:\[[^\]]*\]\s*)*$/)
		{
			$name = $1;    # a variable
		}
		next unless defined $name && $name ne 'C';
		$declared{$name} //= $h;
	}
}
my %defined_in;    # symbol -> .c file
my %is_variable;
for my $c (grep { /\.c$/ } @files)
{
	my $text = $code{$c};

	# functions: "[type] name(args)" at the start of a line, then the body
	while ($text =~ /^(?:[A-Za-z_][\w \t*]*?[\s*])?([A-Za-z_]\w*)\s*\([^;{}]*\)\s*(?:\w+\s*\([^;{}]*\)\s*)*\{/mg)
	{
		$defined_in{$1} //= $c if $declared{$1};
	}
	# variables: "type name[...] = ...;" or "type name;" at the start of a line
	while ($text =~ /^(?!static\b|extern\b|typedef\b)[A-Za-z_][^;(){}=\n]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|;)/mg)
	{
		next unless $declared{$1};
		$defined_in{$1} //= $c;
		$is_variable{$1} = 1;
	}
}

# The settings: variables that a file directly in src/ (mailer.c, beside
# _PG_init) defines, that base/mailer.h declares and that every layer reads.
# Reading a setting is no dependency on the code that defines it.
sub is_setting
{
	my ($sym) = @_;
	return $is_variable{$sym} && layer_of_file($defined_in{$sym}) == $TOP;
}

# A header declares only what its folder or a lower one defines.
for my $sym (sort keys %declared)
{
	my $h = $declared{$sym};
	my $c = $defined_in{$sym} or next;
	next if is_setting($sym);
	my ($lh, $lc) = (layer_of_file($h), layer_of_file($c));
	next if $lh < 0 || $lc < 0 || $lc <= $lh;
	push @violations,
	  "$h declares $sym, which $c defines: a header of " . layer_name($lh)
	  . " offers what " . layer_name($lc) . ", a folder above it, defines";
}

# Macros and static inline functions of headers: the names their bodies use.
my %expands;
for my $h (grep { /\.h$/ } @files)
{
	my $text = $code{$h};
	while ($text =~ /^\s*#\s*define\s+(\w+)((?:[^\n\\]|\\.)*)/mg)
	{
		my ($name, $body) = ($1, $2);
		$expands{$name}{$_} = 1 for $body =~ /\b([A-Za-z_]\w*)\b/g;
	}
	while ($text =~ /^static\s+inline\b[^;{]*?\b(\w+)\s*\([^;{}]*\)\s*\{(.*?)^\}/msg)
	{
		my ($name, $body) = ($1, $2);
		$expands{$name}{$_} = 1 for $body =~ /\b([A-Za-z_]\w*)\b/g;
	}
}

# 3. Uses: a .c file that names another's function or variable.
my $nuses = 0;
for my $c (grep { /\.c$/ } @files)
{
	my $text = $code{$c};
	$text =~ s/^\s*#.*$//mg;                 # directives
	$text =~ s/(?:->|\.)\s*[A-Za-z_]\w*//g;  # struct members are no symbols
	my %names = map { $_ => 1 } $text =~ /\b([A-Za-z_]\w*)\b/g;
	my @queue = keys %names;
	while (defined(my $n = shift @queue))
	{
		next unless $expands{$n};
		for my $m (keys %{ $expands{$n} })
		{
			push @queue, $m unless $names{$m}++;
		}
	}
	my %by_target;
	for my $sym (sort keys %names)
	{
		my $d = $defined_in{$sym};
		next unless defined $d && $d ne $c && !is_setting($sym);
		push @{ $by_target{$d} }, $sym;
	}
	for my $d (sort keys %by_target)
	{
		my @syms = @{ $by_target{$d} };
		$nuses++;
		add_edge($c, $d, "uses " . join(', ', @syms));
		my ($lc, $ld) = (layer_of_file($c), layer_of_file($d));
		next if $lc < 0 || $ld < 0;
		$folder_edges{ layer_name($lc) }{ layer_name($ld) } = 1 if $lc != $ld;
		if ($ld > $lc)
		{
			push @violations,
			  "$c uses " . join(', ', @syms) . ", which $d defines: "
			  . layer_name($lc) . " may not use " . layer_name($ld)
			  . ", a folder above it";
		}
	}
}

for my $folder (sort keys %unknown_folder)
{
	push @violations,
	  "src/$folder/ is not a layer: add it to LAYERS in test/check-layers.sh "
	  . "and to docs/ARCHITECTURE.md, \"Folder map and layering\"";
}

# 4. Cycles.  Each allowed pair counts as one node; any cycle left is a
# violation, shown with every dependency among its files.
my %unit = map { $_ => $_ } @files;
my %allowed_used;
for my $pair (sort keys %ALLOWED_PAIRS)
{
	my ($a, $b) = split ' ', $pair;
	next unless $is_file{$a} && $is_file{$b};
	$unit{$b} = $unit{$a};
}
my %uedges;
for my $from (keys %edges)
{
	for my $to (keys %{ $edges{$from} })
	{
		my ($uf, $ut) = ($unit{$from}, $unit{$to});
		if ($uf eq $ut)
		{
			$allowed_used{"$from $to"} = 1 if $from ne $to;
			next;
		}
		$uedges{$uf}{$ut} = 1;
	}
}

# Tarjan's strongly connected components.
my ($index, @stack, %onstack, %idx, %low, @sccs) = (0);
sub strongconnect
{
	my ($v) = @_;
	$idx{$v} = $low{$v} = $index++;
	push @stack, $v;
	$onstack{$v} = 1;
	for my $w (sort keys %{ $uedges{$v} || {} })
	{
		if (!exists $idx{$w})
		{
			strongconnect($w);
			$low{$v} = $low{$w} if $low{$w} < $low{$v};
		}
		elsif ($onstack{$w})
		{
			$low{$v} = $idx{$w} if $idx{$w} < $low{$v};
		}
	}
	if ($low{$v} == $idx{$v})
	{
		my @scc;
		my $w;
		do
		{
			$w = pop @stack;
			delete $onstack{$w};
			push @scc, $w;
		} while ($w ne $v);
		push @sccs, [ sort @scc ] if @scc > 1;
	}
}
my %units = map { $_ => 1 } values %unit;
strongconnect($_) for grep { !exists $idx{$_} } sort keys %units;

# The members of a unit, and why one unit depends on another.
sub members { my ($u) = @_; return sort grep { $unit{$_} eq $u } @files; }
sub unit_label { my ($u) = @_; return join(' + ', members($u)); }
sub why
{
	my ($uf, $ut) = @_;
	my @why;
	for my $f (members($uf))
	{
		for my $t (members($ut))
		{
			push @why, "$f -> $t: $_" for @{ $edges{$f}{$t} || [] };
		}
	}
	return @why;
}

for my $scc (@sccs)
{
	my %in = map { $_ => 1 } @$scc;
	my $text = "dependency cycle among " . join(', ', map { unit_label($_) } @$scc)
	  . "; fix it or allow the pair in ALLOWED_PAIRS:";
	for my $from (@$scc)
	{
		for my $to (sort grep { $in{$_} } keys %{ $uedges{$from} })
		{
			$text .= "\n        $_" for why($from, $to);
		}
	}
	push @violations, $text;
}

# Report.
my @folders = map { layer_name($_) } 0 .. $TOP;
if ($verbose)
{
	for my $from (sort keys %edges)
	{
		for my $to (sort keys %{ $edges{$from} })
		{
			print "$from -> $to: $_\n" for @{ $edges{$from}{$to} };
		}
	}
}
if (@violations)
{
	print "check-layers: " . scalar(@violations) . " violation"
	  . (@violations == 1 ? '' : 's')
	  . " of the layering (bottom to top: "
	  . join(' < ', @folders) . "):\n";
	print "  $_\n" for @violations;
	exit 1;
}
printf "check-layers: %d files, %d project includes, %d file dependencies; "
  . "layers hold (bottom to top: %s), no cycle.\n",
  scalar(@files), $nincludes, $nuses, join(' < ', @folders);
for my $f (@folders)
{
	my @to = grep { $folder_edges{$f}{$_} } @folders;
	printf "  %-11s -> %s\n", $f, @to ? join(', ', @to) : '(nothing)';
}
for my $pair (sort keys %ALLOWED_PAIRS)
{
	my ($a, $b) = split ' ', $pair;
	if ($allowed_used{"$a $b"} && $allowed_used{"$b $a"})
	{
		print "  allowed cycle: $a <-> $b: $ALLOWED_PAIRS{$pair}\n";
	}
	else
	{
		print "  note: $a and $b no longer depend on each other both ways: "
		  . "remove the pair from ALLOWED_PAIRS\n";
	}
}
exit 0;
