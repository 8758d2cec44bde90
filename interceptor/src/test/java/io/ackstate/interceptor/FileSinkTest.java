package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class FileSinkTest {
    private static List<Path> files(Path dir, String glob) throws IOException {
        try (Stream<Path> s = Files.list(dir)) {
            return s.filter(p -> p.getFileSystem().getPathMatcher("glob:" + glob).matches(p.getFileName()))
                    .sorted().toList();
        }
    }

    @Test
    void aFileIsVisibleOnlyOnceCompleteAndRollsByCount(@TempDir Path dir) throws IOException {
        FileSink sink = new FileSink(dir, "run1", 42L, 2, 60_000);
        sink.write(Lines.batch("{\"a\":1}"));
        assertEquals(List.of(), files(dir, "ackstate-*.json"), "half a file must not be visible");
        assertEquals(1, files(dir, ".ackstate-*.tmp").size());
        sink.write(Lines.batch("{\"a\":2}", "{\"a\":3}"));
        List<Path> done = files(dir, "ackstate-*.json");
        assertEquals(1, done.size());
        assertEquals(List.of("{\"a\":1}", "{\"a\":2}"), Files.readAllLines(done.get(0)));
        assertTrue(done.get(0).getFileName().toString().startsWith("ackstate-42-run1-"));
        sink.close();
        assertEquals(2, files(dir, "ackstate-*.json").size());
        assertEquals(List.of(), files(dir, ".*"));
    }

    @Test
    void rollsByAgeEvenWhenIdleAndLeavesNoEmptyFile(@TempDir Path dir) throws IOException {
        FileSink sink = new FileSink(dir, "run2", 1L, 1000, 50);
        sink.tick(System.currentTimeMillis());
        assertEquals(List.of(), files(dir, "*"), "nothing written, nothing created");
        sink.write(Lines.batch("{}"));
        sink.tick(System.currentTimeMillis() + 100);
        assertEquals(1, files(dir, "ackstate-*.json").size());
        sink.close();
        assertEquals(1, files(dir, "*").size());
    }

    @Test
    void aBatchLargerThanAFileIsSplitAcrossFilesInOrder(@TempDir Path dir) throws IOException {
        FileSink sink = new FileSink(dir, "run4", 1L, 3, 60_000);
        sink.write(Lines.batch("{\"a\":1}"));
        sink.write(Lines.batch("{\"a\":2}", "{\"a\":3}", "{\"a\":4}", "{\"a\":5}", "{\"a\":6}", "{\"a\":7}",
                "{\"a\":8}"));
        sink.close();
        List<Path> done = files(dir, "ackstate-*.json");
        assertEquals(3, done.size());
        assertEquals(List.of("{\"a\":1}", "{\"a\":2}", "{\"a\":3}"), Files.readAllLines(done.get(0)));
        assertEquals(List.of("{\"a\":4}", "{\"a\":5}", "{\"a\":6}"), Files.readAllLines(done.get(1)));
        assertEquals(List.of("{\"a\":7}", "{\"a\":8}"), Files.readAllLines(done.get(2)));
    }

    @Test
    void aFileMaxOfZeroStillWritesALineAFile(@TempDir Path dir) throws IOException {
        FileSink sink = new FileSink(dir, "run5", 1L, 0, 60_000);
        sink.write(Lines.batch("{\"a\":1}", "{\"a\":2}"));
        sink.close();
        assertEquals(2, files(dir, "ackstate-*.json").size());
    }

    @Test
    void writesLinesAsUtf8(@TempDir Path dir) throws IOException {
        FileSink sink = new FileSink(dir, "run3", 1L, 1000, 60_000);
        sink.write(Lines.batch("{\"consumer_name\":\"gr\u00fc\u00dfe \u6d88\u8d39\"}"));
        sink.close();
        Path done = files(dir, "ackstate-*.json").get(0);
        assertEquals(List.of("{\"consumer_name\":\"gr\u00fc\u00dfe \u6d88\u8d39\"}"),
                Files.readAllLines(done, java.nio.charset.StandardCharsets.UTF_8));
    }
}
