//! FlowWindow: bytes replicated in the last whole second, what `haStatus` shows as a
//! connection's transfer speed (RocketMQ's FlowMonitor, `transferredByteInSecond`). Pure: the
//! caller passes the current second, so the arithmetic is tested without a clock.

/// Bytes counted in the current second and in the one before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowWindow {
    /// The second (since the epoch) `current` counts.
    second: u64,
    /// Bytes counted during `second`.
    current: u64,
    /// Bytes counted during `second - 1`.
    previous: u64,
}

impl FlowWindow {
    /// Counts `bytes` moved during `now_s`.
    pub fn record(&mut self, bytes: u64, now_s: u64) {
        if now_s != self.second {
            self.previous = if now_s == self.second + 1 {
                self.current
            } else {
                0
            };
            self.current = 0;
            self.second = now_s;
        }
        self.current += bytes;
    }

    /// Bytes moved during the last whole second before `now_s` (0 when nothing moved then).
    pub fn per_second(&self, now_s: u64) -> u64 {
        if now_s == self.second {
            self.previous
        } else if now_s == self.second + 1 {
            self.current
        } else {
            0
        }
    }
}

/// The current second since the epoch (the project's one clock, `now_ms`).
pub fn now_s() -> u64 {
    second_of(conveyor_protocol::time::now_ms())
}

/// The second (since the epoch) of a time in ms since the epoch.
pub fn second_of(ms: i64) -> u64 {
    (ms / 1000).max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_the_last_whole_second() {
        let mut w = FlowWindow::default();
        w.record(100, 10);
        w.record(50, 10);
        assert_eq!(w.per_second(10), 0, "second 10 is not over yet");
        assert_eq!(w.per_second(11), 150);
        w.record(70, 11);
        assert_eq!(w.per_second(11), 150);
        assert_eq!(w.per_second(12), 70);
        assert_eq!(w.per_second(13), 0, "nothing moved in second 12");
        w.record(5, 20);
        assert_eq!(w.per_second(20), 0, "seconds 12 to 19 were idle");
        assert_eq!(w.per_second(21), 5);
    }
}
