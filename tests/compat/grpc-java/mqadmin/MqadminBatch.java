import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.regex.Pattern;

import org.apache.commons.cli.CommandLine;
import org.apache.commons.cli.DefaultParser;
import org.apache.commons.cli.Options;
import org.apache.rocketmq.acl.common.AclUtils;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.srvutil.ServerUtil;
import org.apache.rocketmq.tools.command.MQAdminStartup;
import org.apache.rocketmq.tools.command.SubCommand;

/**
 * Runs many mqadmin commands (rocketmq-tools 5.x sub-commands) in one JVM, up to 8 at a time, so that grpc.sh's setup
 * (two dozen updateTopic/updateSubGroup calls) costs one JVM start instead of one per command, and the 3 s pauses
 * some mqadmin commands spend in their client's shutdown overlap. Each command is looked up, parsed and executed the
 * way MQAdminStartup.main0 (what `mqadmin.sh COMMAND ARGS...` runs) does it.
 *
 *   java -cp "$(cat ~/.cache/conveyor/compat/java-rmq5.classpath)" MqadminBatch.java NAMESRV_ADDR FILE
 *
 * FILE has one command per line: EXPECTED_REGEX, a tab, then the mqadmin arguments separated by spaces (no quoting).
 * Blank lines separate blocks: the commands of a block run concurrently, the blocks one after the other. A command
 * passes when its output matches EXPECTED_REGEX and shows no failure ("command failed", an exception, usage text;
 * mqadmin itself exits 0 either way); a failing command is retried for up to 30 s. Prints, per command,
 * "ok ARGS (TIME ms)" or "failed ARGS (TIME ms)" followed by its output indented with "  # "; exits 1 if any failed.
 */
public final class MqadminBatch extends MQAdminStartup {
    private static final Pattern FAILED = Pattern.compile("command failed|Exception(:|$)|Usage:|usage:", Pattern.MULTILINE);
    private static final ThreadLocal<ByteArrayOutputStream> CAPTURE = new ThreadLocal<>();
    private static final PrintStream REAL_OUT = System.out;

    /** System.out and System.err while commands run: each command thread's output goes to its own buffer. */
    private static final PrintStream DISPATCH = new PrintStream(new OutputStream() {
        @Override
        public void write(int b) {
            ByteArrayOutputStream buf = CAPTURE.get();
            if (buf != null) {
                buf.write(b);
            }
        }

        @Override
        public void write(byte[] b, int off, int len) {
            ByteArrayOutputStream buf = CAPTURE.get();
            if (buf != null) {
                buf.write(b, off, len);
            }
        }
    }, true, StandardCharsets.UTF_8);

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Exception e) {
            e.printStackTrace(REAL_OUT);
            System.exit(2);
        }
    }

    private static void run(String[] args) throws Exception {
        String namesrv = args[0];
        List<List<String>> blocks = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(args[1]), StandardCharsets.UTF_8)) {
            if (line.isBlank()) {
                if (!current.isEmpty()) {
                    blocks.add(current);
                    current = new ArrayList<>();
                }
            } else if (!line.startsWith("#")) {
                current.add(line);
            }
        }
        if (!current.isEmpty()) {
            blocks.add(current);
        }

        // As main0 does before every command: the sub-command table, the name server, the tools' ACL hook.
        initCommand();
        System.setProperty(MixAll.NAMESRV_ADDR_PROPERTY, namesrv);
        System.setOut(DISPATCH);
        System.setErr(DISPATCH);
        boolean allOk = true;
        ExecutorService pool = Executors.newFixedThreadPool(8);
        for (List<String> block : blocks) {
            List<Future<String>> results = new ArrayList<>();
            for (String line : block) {
                results.add(pool.submit(() -> runLine(line, namesrv)));
            }
            for (Future<String> f : results) {
                String report = f.get();
                allOk &= report.startsWith("ok ");
                REAL_OUT.print(report);
                REAL_OUT.flush();
            }
        }
        pool.shutdown();
        REAL_OUT.flush();
        System.exit(allOk ? 0 : 1);
    }

    private static String runLine(String line, String namesrv) throws InterruptedException {
        int tab = line.indexOf('\t');
        Pattern expected = Pattern.compile(line.substring(0, tab), Pattern.MULTILINE);
        List<String> argv = new ArrayList<>(Arrays.asList(line.substring(tab + 1).trim().split(" +")));
        argv.add("-n");
        argv.add(namesrv);
        String shown = String.join(" ", argv);
        long start = System.currentTimeMillis();
        long deadline = start + 30_000;
        String out;
        boolean ok;
        while (true) {
            ByteArrayOutputStream buf = new ByteArrayOutputStream();
            CAPTURE.set(buf);
            try {
                execute(argv);
            } catch (Throwable t) {
                t.printStackTrace(DISPATCH);
            } finally {
                DISPATCH.flush();
                CAPTURE.remove();
            }
            out = buf.toString(StandardCharsets.UTF_8);
            ok = expected.matcher(out).find() && !FAILED.matcher(out).find();
            if (ok || System.currentTimeMillis() >= deadline) {
                break;
            }
            Thread.sleep(1000);
        }
        StringBuilder sb = new StringBuilder();
        sb.append(ok ? "ok " : "failed ").append(shown).append(" (").append(System.currentTimeMillis() - start)
                .append(" ms)\n");
        if (!ok) {
            sb.append("  # expected /").append(expected.pattern()).append("/ in the output of mqadmin ").append(shown)
                    .append(":\n");
            String[] outLines = out.split("\n");
            for (int i = 0; i < Math.min(outLines.length, 30); i++) {
                sb.append("  # ").append(outLines[i]).append('\n');
            }
        }
        return sb.toString();
    }

    /** MQAdminStartup.main0's dispatch of one command line (sub-command lookup, option parsing, execute). */
    private static void execute(List<String> argv) throws Exception {
        SubCommand cmd = null;
        synchronized (SUB_COMMANDS) {
            for (SubCommand c : SUB_COMMANDS) {
                String name = argv.get(0);
                if (c.commandName().equalsIgnoreCase(name)
                        || c.commandAlias() != null && c.commandAlias().equalsIgnoreCase(name)) {
                    cmd = c;
                    break;
                }
            }
        }
        if (cmd == null) {
            System.out.printf("The sub command %s not exist.%n", argv.get(0));
            return;
        }
        String[] subargs = argv.subList(1, argv.size()).toArray(new String[0]);
        Options options = ServerUtil.buildCommandlineOptions(new Options());
        CommandLine commandLine = ServerUtil.parseCmdLine("mqadmin " + cmd.commandName(), subargs,
                cmd.buildCommandlineOptions(options), new DefaultParser());
        if (commandLine == null) {
            System.out.println("usage: the arguments did not parse");
            return;
        }
        String home = System.getProperty(MixAll.ROCKETMQ_HOME_PROPERTY, System.getenv(MixAll.ROCKETMQ_HOME_ENV));
        cmd.execute(commandLine, options, AclUtils.getAclRPCHook(home + MixAll.ACL_CONF_TOOLS_FILE));
    }
}
