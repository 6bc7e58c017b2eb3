import org.apache.pulsar.client.api.*;
public class PropsProduce {
  public static void main(String[] a) throws Exception {
    PulsarClient c = PulsarClient.builder().serviceUrl(a[0]).build();
    Producer<byte[]> p = c.newProducer().topic(a[1]).enableBatching(false).create();
    p.send("{\"i\":1}".getBytes());
    TypedMessageBuilder<byte[]> m = p.newMessage().value("{\"i\":2}".getBytes());
    if (a[2].equals("props")) for (int k = 0; k < 65; k++) m = m.property("p" + k, "v");
    else if (a[2].equals("nulkey")) m = m.key("a\u0000b");
    else if (a[2].equals("nulprop")) m = m.property("x", "a\u0000b");
    m.send();
    p.send("{\"i\":3}".getBytes());
    p.close(); c.close();
  }
}
