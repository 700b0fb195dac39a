public import LoopPersistence

extension ManualClock: EpochClock {
    /// The clock's time since it was created: a durable loop on this clock records its timers' due times
    /// on it, so a test that moves the clock moves recorded time too (a restart on the same clock finds
    /// its timers due as far as the clock has moved).
    public var sinceEpoch: Duration { now.offset }
}
