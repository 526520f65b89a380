-- The sink's table: barrierflow never creates or alters it.
CREATE TABLE IF NOT EXISTS user_minute_totals (
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    user_id      text        NOT NULL,
    total        double precision NOT NULL,
    payments     bigint      NOT NULL,
    PRIMARY KEY (user_id, window_start)
);
