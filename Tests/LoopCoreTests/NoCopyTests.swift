import LoopCore
import Testing

/// The O(1) rule: applying an event through the core never copies the state, so an append to an array
/// in the state writes into the same buffer while its capacity suffices.
///
/// Each test checks the buffer's address after every event against its address before that event: a copy
/// allocates a new buffer while the old one is still alive, so every copy shows as a changed address at the
/// step where it happened.
@Suite struct NoCopyTests {
    static let events = 500

    /// A counter state whose history has room for every event, and the address of that room.
    static func roomyState() -> (Counter.State, address: UInt) {
        var history: [Int] = []
        history.reserveCapacity(events + 1)
        let address = history.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
        return (Counter.State(count: 0, history: history), address)
    }

    static func address(of array: [Int]) -> UInt {
        array.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
    }

    /// Steps a machine `events` times; returns the number of events after which the buffer had moved.
    static func movedBuffers(_ update: Update<Counter.State, Counter.Event, Counter.Effect>) -> Int {
        let (state, address) = roomyState()
        var machine = Machine(state: consume state, update: update)
        var previous = address
        var moved = 0
        for _ in 0..<events {
            _ = machine.process(.increment)
            let current = Self.address(of: machine.state.history)
            if current != previous { moved += 1 }
            previous = current
        }
        #expect(machine.state.history.count == events)
        return moved
    }

    @Test func inPlaceUpdateNeverCopiesTheState() {
        #expect(Self.movedBuffers(Update(Counter.update)) == 0)
    }

    @Test func pureValueUpdateNeverCopiesTheState() {
        #expect(Self.movedBuffers(Update(next: Counter.next)) == 0)
    }

    @Test func combinedUpdatesNeverCopyTheState() {
        let logOnly = Update<Counter.State, Counter.Event, Counter.Effect> { _, _ in [] }
        #expect(Self.movedBuffers(.combine(logOnly, Update(Counter.update), logOnly)) == 0)
    }

    /// The control: an update that copies the state before mutating it is caught by the same check.
    @Test func theCheckDetectsAnUpdateThatCopies() {
        let copying = Update<Counter.State, Counter.Event, Counter.Effect> { state, event in
            var copy = state
            let effects = Counter.update(&copy, event)
            state = copy
            return effects
        }
        #expect(Self.movedBuffers(copying) == Self.events)
    }

    @Test func replayNeverCopiesTheState() {
        let (state, address) = Self.roomyState()
        let replayed = Update(Counter.update)
            .replay(
                from: First(state: consume state),
                events: Array(repeating: .increment, count: Self.events)
            )
        #expect(Self.address(of: replayed.state.history) == address)
        #expect(replayed.state.history == Array(1...Self.events))
    }

    @Test func embeddedChildrenAreMutatedInPlace() {
        let (main, mainAddress) = Self.roomyState()
        let (scratch, scratchAddress) = Self.roomyState()
        let (session, sessionAddress) = Self.roomyState()
        var machine = Machine(
            state: App.State(main: consume main, scratch: consume scratch, sessions: ["s": consume session]),
            update: App.update
        )
        var previous = [mainAddress, scratchAddress, sessionAddress]
        var moved = 0
        for _ in 0..<Self.events {
            _ = machine.process(.main(.increment))
            _ = machine.process(.scratch(.increment))
            _ = machine.process(.session("s", .increment))
            let addresses = [
                Self.address(of: machine.state.main.history),
                Self.address(of: machine.state.scratch?.history ?? []),
                Self.address(of: machine.state.sessions["s"]?.history ?? []),
            ]
            moved += zip(addresses, previous).filter { $0 != $1 }.count
            previous = addresses
        }
        #expect(moved == 0)
        #expect(machine.state.sessions["s"]?.count == Self.events)
    }

    enum Screen: Sendable {
        case loading
        case counter(Counter.State)
    }

    enum ScreenEvent: Sendable {
        case counter(Counter.Event)
    }

    static func screenUpdate(placeholder: Bool) -> Update<Screen, ScreenEvent, Counter.Effect> {
        let extract: @Sendable (Screen) -> Counter.State? = { if case .counter(let state) = $0 { state } else { nil } }
        let event: @Sendable (ScreenEvent) -> Counter.Event? = {
            if case .counter(let event) = $0 { event } else { nil }
        }
        guard placeholder else {
            // The naive way: mutate the extracted copy while the enum still holds the storage.
            return Update { screen, screenEvent in
                guard let childEvent = event(screenEvent), var state = extract(screen) else { return [] }
                let effects = Counter.update(&state, childEvent)
                screen = .counter(state)
                return effects
            }
        }
        return Update<Screen, ScreenEvent, Counter.Effect>.embedCase(
            Update(Counter.update),
            state: extract,
            embed: Screen.counter,
            placeholder: { .loading },
            event: event,
            effect: { $0 }
        )
    }

    static func movedBuffers(screen update: Update<Screen, ScreenEvent, Counter.Effect>) -> Int {
        let (state, address) = roomyState()
        var machine = Machine(state: Screen.counter(consume state), update: update)
        var previous = address
        var moved = 0
        for _ in 0..<events {
            _ = machine.process(.counter(.increment))
            guard case .counter(let current) = machine.state else { return -1 }
            let now = Self.address(of: current.history)
            if now != previous { moved += 1 }
            previous = now
        }
        return moved
    }

    /// A child whose state is an enum case is mutated in place, as one at a key path is; the naive way
    /// copies on every event, which shows the check would see it.
    @Test func aChildInAnEnumCaseIsMutatedInPlace() {
        #expect(Self.movedBuffers(screen: Self.screenUpdate(placeholder: true)) == 0)
        #expect(Self.movedBuffers(screen: Self.screenUpdate(placeholder: false)) > 0)
    }

    @Test func anEventForAChildInAnotherCaseChangesNothing() {
        let update = Update<Screen, ScreenEvent, Counter.Effect>.embedCase(
            Update(Counter.update),
            state: { if case .counter(let state) = $0 { state } else { nil } },
            embed: Screen.counter,
            placeholder: { .loading },
            event: { if case .counter(let event) = $0 { event } else { nil } },
            effect: { $0 },
            absent: { _ in [] }
        )
        var screen = Screen.loading
        #expect(update(&screen, .counter(.increment)).isEmpty)
        guard case .loading = screen else {
            Issue.record("the state changed")
            return
        }
    }
}
