import LoopCore

/// A parent program that embeds the counter three ways: one always present, one optional, and one
/// per session id.
enum App {
    struct State: Equatable, Sendable {
        var main = Counter.State()
        var scratch: Counter.State?
        var sessions: [String: Counter.State] = [:]
        var audit: [String] = []
    }

    enum Event: Equatable, Sendable {
        case main(Counter.Event)
        case scratch(Counter.Event)
        case session(String, Counter.Event)
        case openScratch
        case openSession(String)
    }

    enum Effect: Equatable, Sendable {
        case main(Counter.Effect)
        case scratch(Counter.Effect)
        case session(String, Counter.Effect)
        case unknown(Event)
        case audited(String)
    }

    static let counter = Update(Counter.update)

    static let main = Update<State, Event, Effect>.embed(
        counter,
        state: \.main,
        event: { if case .main(let event) = $0 { event } else { nil } },
        effect: Effect.main
    )

    static let scratch = Update<State, Event, Effect>.embedIfPresent(
        counter,
        state: \.scratch,
        event: { if case .scratch(let event) = $0 { event } else { nil } },
        effect: Effect.scratch,
        absent: { [.unknown($0)] }
    )

    static let sessions = Update<State, Event, Effect>.embedEach(
        counter,
        states: \.sessions,
        event: { if case .session(let id, let event) = $0 { (id, event) } else { nil } },
        effect: Effect.session,
        absent: { [.unknown($0)] }
    )

    /// The parent's own logic, which runs after the children and sees what they did.
    static let own = Update<State, Event, Effect> { state, event in
        switch event {
        case .openScratch:
            state.scratch = Counter.State()
            return []
        case .openSession(let id):
            state.sessions[id] = Counter.State()
            return []
        case .main(let event):
            state.audit.append("main \(event) -> \(state.main.count)")
            return [.audited("main")]
        default:
            return []
        }
    }

    static let update = Update.combine(main, scratch, sessions, own)
}
