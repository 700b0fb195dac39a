extension DurableProgram where State: Sendable, Event: Sendable, Effect: Sendable {
    /// The state `stream`'s recorded history makes: its latest snapshot, then every later event folded
    /// through the update, one page in memory at a time. Nothing runs and nothing is written: no loop
    /// starts, no effect is performed, no lock or ownership is taken, so any process that can read the
    /// store can call it, beside the one that runs the stream's entity (a cluster node reading an entity
    /// another node owns, a report, a tool).
    ///
    /// ```swift
    /// let account = try await Account.program.recordedState(of: "account-17", in: store)
    /// ```
    ///
    /// It is the state as of the last event the store holds when the read gets there: events accepted by
    /// a live entity but not yet recorded are not in it (``DurableLoopGroup/durableState(of:)`` waits
    /// for those). A stream with no records has the program's ``initial`` state.
    ///
    /// - Parameters:
    ///   - stream: the stream's name in the store.
    ///   - store: where it is recorded.
    ///   - events: how its events are encoded (``BinaryCodec``, as a durable loop's default).
    ///   - states: how its snapshots are encoded.
    /// - Throws: ``DurableLoopError/storeFailed(_:)`` naming the stream: the store failed, or a record
    ///   does not decode (with its version).
    public func recordedState(
        of stream: String,
        in store: any EventStore,
        events: some EventCodec<Event>,
        states: some EventCodec<State>
    ) async throws(DurableLoopError) -> State {
        let storage = DurableStorage<State, Event, Effect>(
            store: store,
            events: events,
            states: states,
            // The callers' keys are read and dropped: a window of one holds what decoding needs.
            keysKept: 1,
            clock: ContinuousClock()
        ) { _ in self }
        switch await storage.recover(stream) {
        case .recovered(let state, _, _, _, _, _, _, _): return state
        case .failed(let failure): throw .storeFailed(failure)
        default: throw .storeFailed(DurableFailure(.storeError("stream '\(stream)' was not read"), stream: stream))
        }
    }

    /// ``recordedState(of:in:events:states:)`` for a program whose events and snapshots are in the
    /// compact binary form (``BinaryCodec``, a durable loop's default).
    public func recordedState(
        of stream: String,
        in store: any EventStore
    ) async throws(DurableLoopError) -> State where State: Codable, Event: Codable {
        try await recordedState(of: stream, in: store, events: BinaryCodec<Event>(), states: BinaryCodec<State>())
    }
}
