public import EffectHandlers
public import LoopCore
public import LoopPersistence
public import LoopRuntime

/// A cluster session's entities: their durable loop group, and the two calls the session makes to it
/// for each inbox row, built where the program's types are known.
///
/// A session is generic code of this module, which the compiler cannot specialize for a program it
/// does not see. The group was made there, and every event of every entity then ran the runtime's
/// generic code unspecialized, looking up generic metadata at each step (a fifth of a node's processor
/// time in w14, `Docs/Performance.md`). The group is now made, and these calls are closed over, in
/// ``ClusterNode``'s inlinable initializer, which the compiler specializes where the node is created:
/// the session calls through them into specialized code.
@usableFromInline
struct EntityGroup<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    /// The entities.
    @usableFromInline let group: DurableLoopGroup<String, State, Inboxed<Event>, Effect>
    /// Sends an event to the entity of a stream (the group's `send(_:to:key:)`).
    @usableFromInline let send: @Sendable (Inboxed<Event>, String) -> Delivery
    /// Forwards a request from another process to the entity of a stream (the group's
    /// `forward(_:to:waiter:)`).
    @usableFromInline let forward: @Sendable (DurableCall<Inboxed<Event>>, String, any AnswerWaiter) -> Void
    /// Runs the group (its `run()`, compiled where the program's types are known, as every entity's drain
    /// is then).
    @usableFromInline let run: @Sendable () async throws -> LoopReport

    @inlinable
    init(
        group: DurableLoopGroup<String, State, Inboxed<Event>, Effect>,
        send: @escaping @Sendable (Inboxed<Event>, String) -> Delivery,
        forward: @escaping @Sendable (DurableCall<Inboxed<Event>>, String, any AnswerWaiter) -> Void,
        run: @escaping @Sendable () async throws -> LoopReport
    ) {
        self.group = group
        self.send = send
        self.forward = forward
        self.run = run
    }
}

/// Makes a session's ``EntityGroup``: one for each session a node starts (it starts a new one after
/// losing the database).
@usableFromInline
struct EntityGroupMaker<State: Sendable, Event: Sendable, Effect: Sendable>: Sendable {
    /// What a session gives to make its entities: its store, and the snapshot interval.
    @usableFromInline
    let make: @Sendable (PostgresEventStore, UInt64?) -> EntityGroup<State, Event, Effect>

    /// A maker of groups running `program`, whose effects `router` performs and whose events and states
    /// `events` and `states` encode. Inlinable: the closure made here is the specialized code.
    @inlinable
    init(
        program: DurableProgram<State, Inboxed<Event>, Effect>,
        router: EffectRouter<Effect, Inboxed<Event>>,
        events: some EventCodec<Event>,
        states: some EventCodec<State>
    ) {
        let inboxed = InboxedCodec(events)
        make = { store, snapshotEvery in
            let group = DurableLoopGroup(
                stream: { $0 },
                program: program,
                effects: router,
                store: store,
                events: inboxed,
                states: states,
                snapshotEvery: snapshotEvery
            )
            return EntityGroup(
                group: group,
                send: { event, stream in group.send(event, to: stream) },
                forward: { call, stream, waiter in group.forward(call, to: stream, waiter: waiter) },
                run: { try await group.run() }
            )
        }
    }
}
