package io.ackstate.interceptor;

/**
 * Complete event lines, back to back in one byte array, each one UTF-8 JSON followed by
 * {@code '\n'}: what the writer thread hands a sink ({@link EventJson} builds them).
 *
 * <p>The array is the writer's and is reused for its next batch: a sink copies what it keeps
 * beyond its {@link EventSink#write} call.
 */
interface LineBatch {
    /** How many lines. */
    int count();

    /** The array the lines are in. */
    byte[] bytes();

    /** Where line {@code i} starts in {@link #bytes}: right after the line before it, as the
     *  lines are back to back. */
    default int lineStart(int i) {
        return i == 0 ? 0 : lineEnd(i - 1) + 1;
    }

    /** Where line {@code i} ends (exclusive): the index of its {@code '\n'}. */
    int lineEnd(int i);
}
