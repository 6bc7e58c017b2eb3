package mailer.bench;

import java.io.IOException;
import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * The benchmark's keyed tumbling-window job on Apache Flink, the same as
 * mailer's: decode each order's JSON, take its event time from "ts" with
 * the same bounded out-of-orderness and idle timeout (watermarks per Kafka
 * partition, as mailer keeps them), key by customer, count and sum the
 * amounts (exact decimals, as mailer's numeric) per one-minute tumbling
 * window, RocksDB state with incremental checkpoints every second, one
 * task slot and parallelism 1, results into a discarding sink.
 *
 * The source is bounded at the topic's end offsets when the job starts, so
 * the job ends once it has read every event there.  Prints one line:
 *   flink events N windows W seconds S cpu_seconds C process_cpu_seconds P
 * where S and C cover execute() (MiniCluster start to job end) and P is the
 * whole JVM's CPU time since it started, all from /proc/self/stat.
 *
 * Arguments: brokers topic out_of_orderness_seconds idle_timeout_seconds checkpoint_dir
 */
public final class OrderTotals
{
	/** One decoded order. Public fields and a no-argument constructor: a Flink POJO. */
	public static final class Order
	{
		public String customerId;
		public long ts;				/* event time, ms since 1970 */
		public BigDecimal amount;

		public Order()
		{
		}
	}

	/** One window's result, as a row of mailer's customer_totals. */
	public static final class Total
	{
		public String customerId;
		public long windowStart;
		public long windowEnd;
		public long orders;
		public BigDecimal total;

		public Total()
		{
		}
	}

	/** JSON to Order with Jackson, in the source task (as mailer decodes to jsonb). */
	public static final class OrderSchema implements DeserializationSchema<Order>
	{
		private transient ObjectMapper mapper;

		@Override
		public void open(InitializationContext context)
		{
			mapper = new ObjectMapper();
		}

		@Override
		public Order deserialize(byte[] message) throws IOException
		{
			JsonNode n = mapper.readTree(message);
			Order o = new Order();

			o.customerId = n.get("customer_id").asText();
			o.amount = n.get("amount").decimalValue();
			o.ts = Instant.parse(n.get("ts").asText()).toEpochMilli();
			return o;
		}

		@Override
		public boolean isEndOfStream(Order next)
		{
			return false;
		}

		@Override
		public TypeInformation<Order> getProducedType()
		{
			return TypeInformation.of(Order.class);
		}
	}

	/** count(*) and sum(amount), incrementally: the accumulator is [count, sum]. */
	public static final class CountSum implements AggregateFunction<Order, Total, Total>
	{
		@Override
		public Total createAccumulator()
		{
			Total t = new Total();

			t.total = BigDecimal.ZERO;
			return t;
		}

		@Override
		public Total add(Order o, Total acc)
		{
			acc.orders++;
			acc.total = acc.total.add(o.amount);
			return acc;
		}

		@Override
		public Total getResult(Total acc)
		{
			return acc;
		}

		@Override
		public Total merge(Total a, Total b)
		{
			a.orders += b.orders;
			a.total = a.total.add(b.total);
			return a;
		}
	}

	/** Adds the key and the window's bounds, and counts what was emitted. */
	public static final class WithWindow extends ProcessWindowFunction<Total, Total, String, TimeWindow>
	{
		private final LongCounter windows = new LongCounter();
		private final LongCounter events = new LongCounter();

		@Override
		public void open(org.apache.flink.api.common.functions.OpenContext ctx)
		{
			getRuntimeContext().addAccumulator("windows", windows);
			getRuntimeContext().addAccumulator("events", events);
		}

		@Override
		public void process(String key, Context ctx, Iterable<Total> in, Collector<Total> out)
		{
			for (Total t : in)
			{
				t.customerId = key;
				t.windowStart = ctx.window().getStart();
				t.windowEnd = ctx.window().getEnd();
				windows.add(1);
				events.add(t.orders);
				out.collect(t);
			}
		}
	}

	/** utime + stime of this process, in seconds (clock ticks of 1/100 s). */
	static double processCpuSeconds() throws IOException
	{
		String stat = Files.readString(Path.of("/proc/self/stat"));
		String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");

		/* Fields 14 and 15 of stat(5); f[0] is field 3. */
		return (Long.parseLong(f[11]) + Long.parseLong(f[12])) / 100.0;
	}

	public static void main(String[] args) throws Exception
	{
		if (args.length != 5)
		{
			System.err.println("usage: OrderTotals brokers topic out_of_orderness_s idle_timeout_s checkpoint_dir");
			System.exit(2);
		}
		String brokers = args[0];
		String topic = args[1];
		long outOfOrderness = Long.parseLong(args[2]);
		long idle = Long.parseLong(args[3]);
		String checkpointDir = args[4];

		Configuration conf = new Configuration();
		conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
		conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
		conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "file://" + checkpointDir);
		conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofSeconds(1));

		double cpu0 = processCpuSeconds();
		long t0 = System.nanoTime();

		StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1, conf);

		KafkaSource<Order> source = KafkaSource.<Order>builder()
			.setBootstrapServers(brokers)
			.setTopics(topic)
			.setGroupId("flink_bench")
			.setStartingOffsets(OffsetsInitializer.earliest())
			.setBounded(OffsetsInitializer.latest())
			.setValueOnlyDeserializer(new OrderSchema())
			.setProperty("isolation.level", "read_committed")
			.setProperty("commit.offsets.on.checkpoint", "false")
			.build();

		WatermarkStrategy<Order> watermarks = WatermarkStrategy
			.<Order>forBoundedOutOfOrderness(Duration.ofSeconds(outOfOrderness))
			.withTimestampAssigner((o, ignored) -> o.ts)
			.withIdleness(Duration.ofSeconds(idle));

		env.fromSource(source, watermarks, "orders")
			.keyBy(o -> o.customerId)
			.window(TumblingEventTimeWindows.of(Duration.ofMinutes(1)))
			.aggregate(new CountSum(), new WithWindow())
			.sinkTo(new DiscardingSink<>());

		JobExecutionResult result = env.execute("order_totals");

		double secs = (System.nanoTime() - t0) / 1e9;
		double cpu = processCpuSeconds() - cpu0;
		Long events = result.getAccumulatorResult("events");
		Long windows = result.getAccumulatorResult("windows");

		System.out.printf("flink events %d windows %d seconds %.3f cpu_seconds %.3f process_cpu_seconds %.3f%n",
						  events, windows, secs, cpu, processCpuSeconds());
	}
}
