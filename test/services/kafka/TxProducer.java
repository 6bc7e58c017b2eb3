// A transactional producer for the tests (kafka.sh tx-produce): each
// argument after the brokers and the topic is one transaction,
// "commit:PARTITION:FROM:TO" or "abort:PARTITION:FROM:TO", that writes the
// orders FROM..TO to the partition, each order its own record batch, then
// commits or aborts.  Order i is keyed by its customer c<i mod 10>, with
// the value {"order_id": i, "customer_id": "c<i mod 10>", "amount": i mod 100}.
//
// Run by Java's single-file source launcher (Java 11 and later) with the
// Kafka jars on the class path: no build step.
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxProducer
{
	public static void main(String[] args) throws Exception
	{
		if (args.length < 3)
		{
			System.err.println("usage: TxProducer BROKERS TOPIC (commit|abort):PARTITION:FROM:TO ...");
			System.exit(2);
		}
		Properties props = new Properties();
		props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
		props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "mailer-test-" + ProcessHandle.current().pid());
		props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
		props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
		// A batch per record: a consumer that fetches one batch at a time
		// sees a transaction's records arrive one by one.
		props.put(ProducerConfig.BATCH_SIZE_CONFIG, "1");
		props.put(ProducerConfig.LINGER_MS_CONFIG, "0");
		String topic = args[1];

		try (KafkaProducer<String, String> producer = new KafkaProducer<>(props))
		{
			producer.initTransactions();
			for (int a = 2; a < args.length; a++)
			{
				String[] op = args[a].split(":");
				if (op.length != 4 || !(op[0].equals("commit") || op[0].equals("abort")))
					throw new IllegalArgumentException("not (commit|abort):PARTITION:FROM:TO: " + args[a]);
				int partition = Integer.parseInt(op[1]);
				long from = Long.parseLong(op[2]);
				long to = Long.parseLong(op[3]);

				producer.beginTransaction();
				for (long i = from; i <= to; i++)
				{
					String customer = "c" + (i % 10);
					String value = "{\"order_id\": " + i + ", \"customer_id\": \"" + customer
						+ "\", \"amount\": " + (i % 100) + "}";
					producer.send(new ProducerRecord<>(topic, partition, customer, value));
				}
				producer.flush();
				if (op[0].equals("commit"))
					producer.commitTransaction();
				else
					producer.abortTransaction();
			}
		}
	}
}
