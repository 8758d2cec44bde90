package io.ackstate.interceptor;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** Batches of lines for the sinks' tests, and a batch's lines as Strings. */
final class Lines {
    private Lines() {
    }

    /** The batch's lines, decoded. */
    static List<String> of(LineBatch batch) {
        List<String> lines = new ArrayList<>();
        for (int i = 0; i < batch.count(); i++) {
            lines.add(line(batch, i));
        }
        return lines;
    }

    static String line(LineBatch batch, int i) {
        int from = batch.lineStart(i);
        return new String(batch.bytes(), from, batch.lineEnd(i) - from, StandardCharsets.UTF_8);
    }

    /** A batch of these lines as the writer hands them over: UTF-8, each followed by a newline. */
    static LineBatch batch(String... lines) {
        StringBuilder all = new StringBuilder();
        int[] ends = new int[lines.length];
        int size = 0;
        for (int i = 0; i < lines.length; i++) {
            all.append(lines[i]).append('\n');
            size += lines[i].getBytes(StandardCharsets.UTF_8).length;
            ends[i] = size++;
        }
        byte[] bytes = all.toString().getBytes(StandardCharsets.UTF_8);
        return new LineBatch() {
            @Override
            public int count() {
                return lines.length;
            }

            @Override
            public byte[] bytes() {
                return bytes;
            }

            @Override
            public int lineEnd(int i) {
                return ends[i];
            }
        };
    }
}
