package io.ackstate.interceptor;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;

/**
 * Rolling JSON Lines files in one directory.
 *
 * <p>Lines go to {@code .ackstate-<run>-<n>.json.tmp}; when the file holds {@code maxEvents}
 * lines or is {@code maxMillis} old, it is closed and renamed (atomically, same directory) to
 * {@code ackstate-<start>-<run>-<n>.json}. Spark's file source skips names that start with a
 * dot, so it never reads half a file; the start time in the name sorts files of one broker run.
 * An empty file is never left behind. Lines are encoded with {@code String.getBytes} (a copy for
 * the ASCII that event lines nearly always are) into a 64 KiB buffer, not through a
 * {@code Writer}'s character encoder, which cost the writer thread most of its CPU.
 */
final class FileSink implements EventSink {
    private final Path directory;
    private final String run;
    private final long startMillis;
    private final int maxEvents;
    private final long maxMillis;
    private int fileNo;
    private static final int BUFFER_BYTES = 1 << 16;
    private OutputStream open;
    private Path openPath;
    private long openedAt;
    private int lines;

    FileSink(Path directory, String run, long startMillis, int maxEvents, long maxMillis) throws IOException {
        this.directory = Files.createDirectories(directory);
        this.run = run;
        this.startMillis = startMillis;
        this.maxEvents = maxEvents;
        this.maxMillis = maxMillis;
    }

    @Override
    public void write(List<String> batch) throws IOException {
        for (String line : batch) {
            if (open == null) {
                openPath = directory.resolve(".ackstate-" + run + "-" + fileNo + ".json.tmp");
                open = new BufferedOutputStream(Files.newOutputStream(openPath), BUFFER_BYTES);
                openedAt = System.currentTimeMillis();
                lines = 0;
            }
            open.write(line.getBytes(StandardCharsets.UTF_8));
            open.write('\n');
            if (++lines >= maxEvents) {
                roll();
            }
        }
    }

    @Override
    public void tick(long nowMillis) throws IOException {
        if (open != null && nowMillis - openedAt >= maxMillis) {
            roll();
        }
    }

    private void roll() throws IOException {
        open.close();
        Path done = directory.resolve(String.format("ackstate-%d-%s-%06d.json", startMillis, run, fileNo));
        Files.move(openPath, done, StandardCopyOption.ATOMIC_MOVE);
        open = null;
        fileNo++;
    }

    @Override
    public void close() throws IOException {
        if (open != null) {
            roll();
        }
    }
}
