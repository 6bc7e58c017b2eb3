import org.apache.pulsar.client.api.*;
import java.util.concurrent.TimeUnit;
public class BatchProduce {
  public static void main(String[] a) throws Exception {
    PulsarClient c = PulsarClient.builder().serviceUrl(a[0]).build();
    Producer<byte[]> p = c.newProducer().topic(a[1]).enableBatching(true)
      .batchingMaxMessages(Integer.parseInt(a[4])).batchingMaxPublishDelay(200, TimeUnit.MILLISECONDS)
      .blockIfQueueFull(true).create();
    int from = Integer.parseInt(a[2]), n = Integer.parseInt(a[3]);
    for (int i = from; i < from + n; i++)
      p.sendAsync(("{\"i\":" + i + "}").getBytes());
    p.flush();
    p.close(); c.close();
  }
}
