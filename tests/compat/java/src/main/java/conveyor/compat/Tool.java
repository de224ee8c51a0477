package conveyor.compat;

import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Small helpers for run.sh (not a test):
 *   Tool create-topic TOPIC [QUEUES]   create TOPIC on every master and wait for its route
 *   Tool create-topics QUEUES TOPIC...  the same for several topics
 *   Tool cluster-name                  print the first cluster name known to the name server
 * Prints the result on stdout; errors go to stderr with a non-zero exit.
 */
public final class Tool {
    public static void main(String[] args) {
        int code = 0;
        DefaultMQAdminExt admin = null;
        try {
            if (args.length == 0) {
                throw new IllegalArgumentException("usage: Tool create-topic TOPIC [QUEUES] | Tool cluster-name");
            }
            admin = Common.startAdmin("tool-" + Common.newRunId());
            switch (args[0]) {
                case "create-topic": {
                    int queues = args.length > 2 ? Integer.parseInt(args[2]) : 4;
                    Common.Diag diag = new Common.Diag();
                    try {
                        Common.createTopic(admin, args[1], queues, diag);
                    } catch (Exception e) {
                        diag.print();
                        throw e;
                    }
                    System.out.println(args[1]);
                    break;
                }
                case "create-topics": {
                    int queues = Integer.parseInt(args[1]);
                    for (int i = 2; i < args.length; i++) {
                        Common.Diag diag = new Common.Diag();
                        try {
                            Common.createTopic(admin, args[i], queues, diag);
                        } catch (Exception e) {
                            diag.print();
                            throw e;
                        }
                        System.out.println(args[i]);
                    }
                    break;
                }
                case "cluster-name": {
                    var clusters = admin.examineBrokerClusterInfo().getClusterAddrTable().keySet();
                    if (clusters.isEmpty()) {
                        throw new IllegalStateException("name server knows no cluster");
                    }
                    System.out.println(clusters.iterator().next());
                    break;
                }
                case "broker-name": {
                    // The first broker group of the first cluster.
                    var info = admin.examineBrokerClusterInfo();
                    var names = info.getClusterAddrTable().values().stream()
                        .flatMap(s -> s.stream()).sorted().findFirst();
                    System.out.println(names.orElseThrow(
                        () -> new IllegalStateException("name server knows no broker")));
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown command " + args[0]);
            }
        } catch (Exception e) {
            System.err.println("Tool " + String.join(" ", args) + " failed: " + e);
            code = 1;
        } finally {
            if (admin != null) {
                Common.shutdownQuietly(admin);
            }
        }
        System.out.flush();
        Runtime.getRuntime().halt(code);
    }
}
