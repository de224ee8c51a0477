import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.security.Permission;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * Apache RocketMQ's mqadmin kept running: each request runs one command through MQAdminStartup.main0, exactly what
 * `mqadmin.sh COMMAND ARGS...` runs, in this JVM. Why: a JVM start plus the client's shutdown costs 4 to 7 s per
 * command on a 2-core machine and the compatibility suites run about 150 commands; in one JVM a command takes 20 to
 * 400 ms. Works with rocketmq-tools 4.9.x and 5.x (main0 exists in both).
 *
 *   java -Djava.security.manager=allow -cp "$(cat ~/.cache/conveyor/compat/java-rmq5.classpath)" \
 *       MqadminServer.java PORT_FILE OWNER_PID          (what `mqadmin.sh --serve PORT_FILE OWNER_PID` runs)
 *
 * Ends when the process OWNER_PID (the test script that started it) has ended, so an interrupted suite leaves no
 * JVM behind. Listens on an ephemeral port of 127.0.0.1 and writes it to PORT_FILE. A request is the command's arguments, each
 * ended by a NUL byte, then one more NUL; the answer is everything the command printed, then the line DONE (below),
 * then the connection closes. mqadmin.sh is the client (bash's /dev/tcp). A command that would end the JVM
 * (System.exit, which the tools call on arguments that do not parse) is stopped with the usage text it printed, and
 * the server goes on.
 */
public final class MqadminServer {
    /** The last line of every answer: a client that does not see it knows the command did not finish. */
    static final String DONE = "@@mqadmin-server: done@@";

    /** The output buffer of the request a thread works for; threads a command starts inherit it. */
    private static final InheritableThreadLocal<ByteArrayOutputStream> CAPTURE = new InheritableThreadLocal<>();
    private static final PrintStream REAL_OUT = System.out;
    /** MQAdminStartup's table of sub-commands (subCommandList in 4.9.x, SUB_COMMANDS in 5.x). */
    private static final List<?> SUB_COMMANDS = subCommands();
    /** Requests served so far: each command's client name. */
    private static final AtomicLong REQUESTS = new AtomicLong();

    /** System.out and System.err: a request's threads write into its buffer, any other thread into the real stdout. */
    private static final PrintStream DISPATCH = new PrintStream(new OutputStream() {
        @Override
        public void write(int b) {
            ByteArrayOutputStream buf = CAPTURE.get();
            if (buf != null) {
                buf.write(b);
            } else {
                REAL_OUT.write(b);
            }
        }

        @Override
        public void write(byte[] b, int off, int len) {
            ByteArrayOutputStream buf = CAPTURE.get();
            if (buf != null) {
                buf.write(b, off, len);
            } else {
                REAL_OUT.write(b, off, len);
            }
        }
    }, true, StandardCharsets.UTF_8);

    /** Thrown in place of System.exit inside a command. */
    private static final class ExitRefused extends SecurityException {
        ExitRefused(int status) {
            super("mqadmin called System.exit(" + status + ")");
        }
    }

    @SuppressWarnings("removal")
    public static void main(String[] args) throws Exception {
        System.setSecurityManager(new SecurityManager() {
            @Override
            public void checkPermission(Permission perm) {
            }

            @Override
            public void checkPermission(Permission perm, Object context) {
            }

            @Override
            public void checkExit(int status) {
                if (CAPTURE.get() != null) {
                    throw new ExitRefused(status);
                }
            }
        });
        System.setOut(DISPATCH);
        System.setErr(DISPATCH);
        long owner = Long.parseLong(args[1]);
        Thread watch = new Thread(() -> {
            while (ProcessHandle.of(owner).map(ProcessHandle::isAlive).orElse(false)) {
                try {
                    Thread.sleep(1000);
                } catch (InterruptedException e) {
                    return;
                }
            }
            Runtime.getRuntime().halt(0);
        }, "owner-watch");
        watch.setDaemon(true);
        watch.start();
        try (ServerSocket server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            Path portFile = Paths.get(args[0]);
            Path tmp = Paths.get(args[0] + ".tmp");
            Files.write(tmp, Integer.toString(server.getLocalPort()).getBytes(StandardCharsets.UTF_8));
            Files.move(tmp, portFile, StandardCopyOption.ATOMIC_MOVE);
            while (true) {
                Socket socket = server.accept();
                Thread worker = new Thread(() -> serve(socket), "mqadmin-request");
                worker.setDaemon(true);
                worker.start();
            }
        }
    }

    private static void serve(Socket socket) {
        try (Socket s = socket) {
            List<String> argv = readRequest(s.getInputStream());
            ByteArrayOutputStream buf = new ByteArrayOutputStream();
            // A client of the tools whose instance name is left at DEFAULT takes the PID as its name, and clients of
            // one name share one MQClientInstance: in one JVM a command would get the instance (and the closed
            // connections) of a command before it. A name of its own per command, as a JVM of its own gives it.
            System.setProperty("rocketmq.client.name", "mqadmin-server-" + REQUESTS.incrementAndGet());
            CAPTURE.set(buf);
            try {
                // main0 appends new sub-command objects to this list and runs the first of a name; some keep their
                // admin client from one run to the next (brokerConsumeStats), closed by then. Each run gets new ones.
                SUB_COMMANDS.clear();
                MQAdminStartup.main0(argv.toArray(new String[0]), null);
            } catch (ExitRefused e) {
                DISPATCH.println(e.getMessage());
            } catch (Throwable t) {
                t.printStackTrace(DISPATCH);
            } finally {
                DISPATCH.flush();
                CAPTURE.remove();
            }
            OutputStream out = s.getOutputStream();
            out.write(buf.toByteArray());
            out.write(("\n" + DONE + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (Exception e) {
            e.printStackTrace(REAL_OUT);
        }
    }

    private static List<?> subCommands() {
        for (Field f : MQAdminStartup.class.getDeclaredFields()) {
            if (Modifier.isStatic(f.getModifiers()) && List.class.isAssignableFrom(f.getType())) {
                try {
                    f.setAccessible(true);
                    return (List<?>) f.get(null);
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException(e);
                }
            }
        }
        throw new IllegalStateException("MQAdminStartup has no static list of sub-commands");
    }

    /** The NUL-ended arguments up to the empty one. */
    private static List<String> readRequest(InputStream in) throws Exception {
        List<String> argv = new ArrayList<>();
        ByteArrayOutputStream arg = new ByteArrayOutputStream();
        int b;
        while ((b = in.read()) != -1) {
            if (b != 0) {
                arg.write(b);
            } else if (arg.size() == 0) {
                return argv;
            } else {
                argv.add(arg.toString(StandardCharsets.UTF_8));
                arg.reset();
            }
        }
        throw new IllegalStateException("the request ended before its empty argument");
    }
}
