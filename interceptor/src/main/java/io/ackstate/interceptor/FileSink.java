package io.ackstate.interceptor;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Rolling JSON Lines files in one directory.
 *
 * <p>Lines go to {@code .ackstate-<run>-<n>.json.tmp}; when the file holds {@code maxEvents}
 * lines or is {@code maxMillis} old, it is closed and renamed (atomically, same directory) to
 * {@code ackstate-<start>-<run>-<n>.json}. Spark's file source skips names that start with a
 * dot, so it never reads half a file; the start time in the name sorts files of one broker run.
 * An empty file is never left behind. The lines come as UTF-8 bytes, each followed by its
 * newline, and go into a 64 KiB buffer as they are, all of a file's share of a batch in one call:
 * no {@code Writer}'s character encoder (it cost the writer thread most of its CPU) and no array
 * per line.
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
    public void write(LineBatch batch) throws IOException {
        for (int next = 0; next < batch.count(); ) {
            if (open == null) {
                openPath = directory.resolve(".ackstate-" + run + "-" + fileNo + ".json.tmp");
                open = new BufferedOutputStream(Files.newOutputStream(openPath), BUFFER_BYTES);
                openedAt = System.currentTimeMillis();
                lines = 0;
            }
            // the lines that still fit in this file (at least one), with their newlines
            int last = next + Math.max(1, Math.min(batch.count() - next, maxEvents - lines)) - 1;
            int from = batch.lineStart(next);
            open.write(batch.bytes(), from, batch.lineEnd(last) + 1 - from);
            lines += last - next + 1;
            next = last + 1;
            if (lines >= maxEvents) {
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
