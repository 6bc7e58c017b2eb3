package mailer.bench;

import java.io.IOException;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The Kafka sink benchmark (issue 14) on Apache Flink: read the orders
 * topic with KafkaSource (read_committed, bounded at the end offsets of
 * the job's start) and write to an output topic with KafkaSink and
 * DeliveryGuarantee.EXACTLY_ONCE, checkpoints every second (a Kafka
 * transaction per checkpoint, as mailer's one per epoch), parallelism 1.
 *
 * Modes, the same work as mailer's jobs of the section:
 *   passthrough  every order, key unchanged, value decoded as JSON and
 *                encoded again (mailer's value is jsonb, its sink writes
 *                value::text)
 *   totals       key by customer, running count and sum of the amounts
 *                (exact decimals) in RocksDB; every update is a record,
 *                key {"customer_id": ...}, value {"customer_id", "orders",
 *                "total"} as JSON (mailer's default key and value)
 *
 * Prints one line:
 *   flink records N seconds S cpu_seconds C process_cpu_seconds P
 * S and C cover execute() (MiniCluster start to job end, the last
 * transaction committed); P is the whole JVM's CPU since it started.
 *
 * Arguments: brokers topic output_topic passthrough|totals checkpoint_dir records
 */
public final class KafkaSinkBench
{
	/** One Kafka record as read: key and value bytes. */
	public static final class Message
	{
		public byte[] key;
		public byte[] value;

		public Message()
		{
		}
	}

	/** A customer's running totals. */
	public static final class Total
	{
		public String customerId;
		public long orders;
		public BigDecimal total;

		public Total()
		{
		}
	}

	/** The record's key and value, undecoded. */
	public static final class MessageSchema implements KafkaRecordDeserializationSchema<Message>
	{
		@Override
		public void deserialize(ConsumerRecord<byte[], byte[]> rec, Collector<Message> out)
		{
			Message m = new Message();

			m.key = rec.key();
			m.value = rec.value();
			out.collect(m);
		}

		@Override
		public TypeInformation<Message> getProducedType()
		{
			return TypeInformation.of(Message.class);
		}
	}

	/** An order's customer and amount, decoded with Jackson in the source task. */
	public static final class TotalSchema implements KafkaRecordDeserializationSchema<Total>
	{
		private transient ObjectMapper mapper;

		@Override
		public void open(org.apache.flink.api.common.serialization.DeserializationSchema.InitializationContext ctx)
		{
			mapper = new ObjectMapper();
		}

		@Override
		public void deserialize(ConsumerRecord<byte[], byte[]> rec, Collector<Total> out) throws IOException
		{
			JsonNode n = mapper.readTree(rec.value());
			Total t = new Total();

			t.customerId = n.get("customer_id").asText();
			t.orders = 1;
			t.total = n.get("amount").decimalValue();
			out.collect(t);
		}

		@Override
		public TypeInformation<Total> getProducedType()
		{
			return TypeInformation.of(Total.class);
		}
	}

	/** Passthrough's output: the key as read, the value's JSON decoded and encoded. */
	public static final class MessageOut implements KafkaRecordSerializationSchema<Message>
	{
		private final String topic;
		private transient ObjectMapper mapper;

		MessageOut(String topic)
		{
			this.topic = topic;
		}

		@Override
		public void open(SerializationSchema.InitializationContext ctx, KafkaSinkContext sink)
		{
			mapper = new ObjectMapper();
		}

		@Override
		public ProducerRecord<byte[], byte[]> serialize(Message m, KafkaSinkContext ctx, Long timestamp)
		{
			try
			{
				return new ProducerRecord<>(topic, m.key, mapper.writeValueAsBytes(mapper.readTree(m.value)));
			}
			catch (IOException e)
			{
				throw new RuntimeException(e);
			}
		}
	}

	/** Totals' output: JSON key of the customer, JSON value of the row. */
	public static final class TotalOut implements KafkaRecordSerializationSchema<Total>
	{
		private final String topic;
		private transient ObjectMapper mapper;

		TotalOut(String topic)
		{
			this.topic = topic;
		}

		@Override
		public void open(SerializationSchema.InitializationContext ctx, KafkaSinkContext sink)
		{
			mapper = new ObjectMapper();
		}

		@Override
		public ProducerRecord<byte[], byte[]> serialize(Total t, KafkaSinkContext ctx, Long timestamp)
		{
			ObjectNode key = mapper.createObjectNode();
			ObjectNode value = mapper.createObjectNode();

			key.put("customer_id", t.customerId);
			value.put("customer_id", t.customerId);
			value.put("orders", t.orders);
			value.put("total", t.total);
			try
			{
				return new ProducerRecord<>(topic, mapper.writeValueAsBytes(key), mapper.writeValueAsBytes(value));
			}
			catch (IOException e)
			{
				throw new RuntimeException(e);
			}
		}
	}

	static <T> KafkaSource<T> source(String brokers, String topic, KafkaRecordDeserializationSchema<T> schema)
	{
		return KafkaSource.<T>builder()
			.setBootstrapServers(brokers)
			.setTopics(topic)
			.setGroupId("flink_kafka_sink_bench")
			.setStartingOffsets(OffsetsInitializer.earliest())
			.setBounded(OffsetsInitializer.latest())
			.setDeserializer(schema)
			.setProperty("isolation.level", "read_committed")
			.setProperty("commit.offsets.on.checkpoint", "false")
			.build();
	}

	static <T> KafkaSink<T> sink(String brokers, String prefix, KafkaRecordSerializationSchema<T> schema)
	{
		return KafkaSink.<T>builder()
			.setBootstrapServers(brokers)
			.setRecordSerializer(schema)
			.setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
			.setTransactionalIdPrefix(prefix)
			/* Within the broker's transaction.max.timeout.ms (15 minutes). */
			.setProperty("transaction.timeout.ms", "600000")
			.build();
	}

	public static void main(String[] args) throws Exception
	{
		if (args.length != 6)
		{
			System.err.println("usage: KafkaSinkBench brokers topic output_topic passthrough|totals checkpoint_dir records");
			System.exit(2);
		}
		String brokers = args[0];
		String topic = args[1];
		String output = args[2];
		String mode = args[3];
		String checkpointDir = args[4];
		long records = Long.parseLong(args[5]);
		/* A fresh prefix per run: no transaction of an earlier run to abort. */
		String prefix = "flink-bench-" + mode + "-" + System.currentTimeMillis();

		Configuration conf = new Configuration();
		conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
		conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
		conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "file://" + checkpointDir);
		conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofSeconds(1));

		double cpu0 = OrderTotals.processCpuSeconds();
		long t0 = System.nanoTime();

		StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1, conf);

		switch (mode)
		{
			case "passthrough":
				env.fromSource(source(brokers, topic, new MessageSchema()), WatermarkStrategy.noWatermarks(), "orders")
					.sinkTo(sink(brokers, prefix, new MessageOut(output)));
				break;
			case "totals":
				env.fromSource(source(brokers, topic, new TotalSchema()), WatermarkStrategy.noWatermarks(), "orders")
					.keyBy(t -> t.customerId)
					.reduce((a, b) -> {
						a.orders += b.orders;
						a.total = a.total.add(b.total);
						return a;
					})
					.sinkTo(sink(brokers, prefix, new TotalOut(output)));
				break;
			default:
				System.err.println("KafkaSinkBench: unknown mode " + mode);
				System.exit(2);
		}
		env.execute("kafka_sink_" + mode);

		double secs = (System.nanoTime() - t0) / 1e9;
		double cpu = OrderTotals.processCpuSeconds() - cpu0;

		System.out.printf("flink records %d seconds %.3f cpu_seconds %.3f process_cpu_seconds %.3f%n",
						  records, secs, cpu, OrderTotals.processCpuSeconds());
	}
}
