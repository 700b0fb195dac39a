public import EffectHandlers

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A clock whose readings mean the same in every process and after a restart: a durable loop records
/// its timers' due times on it, and measures what is left of them when it recovers.
///
/// A durable loop reads it from the clock it is given, when that clock conforms (`ManualClock` does,
/// so a test moves recorded time too); otherwise from the system's real-time clock.
public protocol EpochClock: Sendable {
    /// The time since this clock's epoch (the Unix epoch for the system's clock).
    var sinceEpoch: Duration { get }
}

/// The system's real-time clock (`CLOCK_REALTIME`): the epoch clock of a loop whose clock is not one.
public struct SystemEpochClock: EpochClock {
    /// The system's clock.
    public init() {}

    /// The time since the Unix epoch.
    public var sinceEpoch: Duration {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
    }
}

/// How a durable program keeps its timers: which of its effects wait (a lifecycle with a delay:
/// ``/EffectHandlers/EffectLifecycle/delayed(by:key:timeout:)`` and
/// ``/EffectHandlers/EffectLifecycle/debounce(_:for:timeout:)``), and how such an effect is recorded.
/// See ``DurableProgram/keepingTimers(codec:)``.
public struct TimerRecording<Effect>: Sendable {
    /// The effect's lifecycle.
    public let lifecycle: @Sendable (Effect) -> EffectLifecycle
    /// The effect's stored bytes.
    public let encode: @Sendable (Effect) throws -> [UInt8]
    /// The effect its stored bytes hold.
    public let decode: @Sendable ([UInt8]) throws -> Effect

    /// Records effects with `codec`, scheduled by `lifecycle`.
    public init(lifecycle: @escaping @Sendable (Effect) -> EffectLifecycle, codec: some EventCodec<Effect>) {
        self.lifecycle = lifecycle
        encode = { try codec.encode($0) }
        decode = { try codec.decode($0) }
    }

    /// Whether `lifecycle` makes an effect wait for its delay: a delayed or debounced one. (A throttled
    /// one is kept too, as a window or a held effect: see ``TimerKind``.)
    @inlinable
    static func waits(_ lifecycle: EffectLifecycle) -> Bool {
        lifecycle.delay != nil && (lifecycle.policy == .concurrent || lifecycle.policy == .latest)
    }

    /// The lifecycle `lifecycle` has once its wait is over: started at once, under its key (which a
    /// `cancel` or a newer debounce still reaches) and with its timeout. A debounce replaced what ran
    /// under its key when it was let in, not again when it starts.
    @inlinable
    static func due(_ lifecycle: EffectLifecycle) -> EffectLifecycle {
        .concurrent(lifecycle.key, timeout: lifecycle.timeout)
    }

    /// The lifecycle of a throttle's interval, `left` long: no key (a `cancel` of the throttle's key ends
    /// the effect held for it, not the interval), no timeout.
    @inlinable
    static func window(left: Duration) -> EffectLifecycle {
        .delayed(by: max(left, .zero))
    }

    /// The lifecycle of the wait itself, `left` long: the effect's key and policy (so a `cancel` of the
    /// key, or a newer debounce, ends the wait as it would end the effect's), no timeout.
    @inlinable
    static func wait(_ lifecycle: EffectLifecycle, left: Duration) -> EffectLifecycle {
        switch lifecycle.policy {
        case .latest:
            lifecycle.key.map { .debounce($0, for: max(left, .zero)) } ?? .delayed(by: max(left, .zero))
        default: .delayed(by: max(left, .zero), key: lifecycle.key)
        }
    }
}

extension DurableProgram where Effect: ManagedEffect {
    /// The program, keeping its timers across restarts and passivation: an effect whose lifecycle waits
    /// (``/EffectHandlers/EffectLifecycle/delayed(by:key:timeout:)``,
    /// ``/EffectHandlers/EffectLifecycle/debounce(_:for:timeout:)``) is recorded, with its due time,
    /// beside the event that asked for it; a recovered loop waits what is left of it (nothing, if it
    /// was due during the outage) and then performs it.
    ///
    /// ```swift
    /// let program = DurableProgram(initial: Jobs(), update: Update(Jobs.update)).keepingTimers()
    /// ```
    ///
    /// - A timer's effect runs once: its start is recorded (with the next events, or in a record of its
    ///   own), so a restart does not start it again; only a crash between its start and that record
    ///   starts it again, under the same ``/EffectHandlers/IdempotencyKey``, as any effect under way.
    /// - A `cancel` of its key, or a newer debounce of its key, applied before it is due, ends it for
    ///   good: the end is recorded with the event that asked for it.
    /// - Due times are on the loop's clock if it is an ``EpochClock`` (`ManualClock` is), otherwise on
    ///   the system's real-time clock: a clock set back delays recovered timers by as much.
    /// - A throttle (``/EffectHandlers/EffectLifecycle/throttle(_:every:latest:timeout:)``) is decided
    ///   by the durable loop itself, so it holds across restarts too: the interval its first effect
    ///   opens is a timer (a ``TimerKind/window``), an effect asked for within it waits as a
    ///   ``TimerKind/held`` timer (a newer one replaces it; with `latest: false` it is dropped), and
    ///   when the interval ends the held effect starts and opens the next one. A restart within an
    ///   interval does not let a second effect start early, and a held effect is not lost.
    public func keepingTimers(codec: some EventCodec<Effect>) -> DurableProgram {
        var program = self
        program.timers = TimerRecording(lifecycle: { $0.lifecycle }, codec: codec)
        return program
    }
}

extension DurableProgram where Effect: ManagedEffect & Codable {
    /// ``keepingTimers(codec:)``, recording effects in ``BinaryCodec``'s form.
    public func keepingTimers() -> DurableProgram {
        keepingTimers(codec: BinaryCodec<Effect>())
    }
}

/// What a timer a durable loop keeps waits for.
public enum TimerKind: UInt8, Sendable, Hashable {
    /// An effect waiting for its delay (delayed, or debounced): once due, it starts.
    case wait = 0
    /// A throttle's interval under way for its effect's key: the effect started when the interval
    /// opened; when it is due, the interval ends, and the effect held for it (if any) starts and opens
    /// the next.
    case window = 1
    /// A throttled effect asked for within its key's interval, waiting for the interval's end.
    case held = 2
}

/// A timer a durable loop keeps: an effect that waits, the event that asked for it, and when it is due.
public struct DurableTimer<Effect> {
    /// The version of the event that asked for the effect.
    public var version: UInt64
    /// The effect's position among that event's effects.
    public var index: Int
    /// The effect.
    public var effect: Effect
    /// Its stored bytes (with ``TimerRecording/encode``).
    public var payload: [UInt8]
    /// How long it waits from its event's record.
    public var delay: Duration
    /// The effect's lifecycle (its key ends the timer; its policy applies once it is due).
    public var lifecycle: EffectLifecycle
    /// When it is due, on the loop's ``EpochClock``; `nil` until its event is recorded.
    public var due: Duration?
    /// The context its event was sent with, for the scope around the effect (not recorded: a recovered
    /// timer runs without one).
    public var context: EffectContext
    /// What it waits for.
    public var kind: TimerKind
    /// The version of the record its due time counts from: its event's, or, for a held effect that
    /// started and opened an interval, the record that says so (`UInt64.max` until that record is
    /// handed to the store).
    public var from: UInt64

    /// Creates a timer.
    @inlinable
    public init(
        version: UInt64,
        index: Int,
        effect: Effect,
        payload: [UInt8],
        delay: Duration,
        lifecycle: EffectLifecycle,
        due: Duration? = nil,
        context: EffectContext = .none,
        kind: TimerKind = .wait
    ) {
        self.version = version
        self.index = index
        self.effect = effect
        self.payload = payload
        self.delay = delay
        self.lifecycle = lifecycle
        self.due = due
        self.context = context
        self.kind = kind
        self.from = version
    }

    /// The timer as stored.
    @inlinable
    public var recorded: RecordedTimer {
        RecordedTimer(version: version, index: index, payload: payload, delay: delay, due: due, kind: kind)
    }
}

/// A timer as a record or snapshot holds it: the effect's bytes, not the effect.
public struct RecordedTimer: Hashable, Sendable {
    /// The version of the event that asked for the effect.
    public var version: UInt64
    /// The effect's position among that event's effects.
    public var index: Int
    /// The effect's stored bytes.
    public var payload: [UInt8]
    /// How long it waits from its event's record.
    public var delay: Duration
    /// When it is due, on the loop's ``EpochClock``; `nil` until its event is recorded.
    public var due: Duration?
    /// What it waits for.
    public var kind: TimerKind

    /// Creates a recorded timer.
    @inlinable
    public init(
        version: UInt64,
        index: Int,
        payload: [UInt8],
        delay: Duration,
        due: Duration?,
        kind: TimerKind = .wait
    ) {
        self.version = version
        self.index = index
        self.payload = payload
        self.delay = delay
        self.due = due
        self.kind = kind
    }
}

/// What an event's record says of timers: those it started, with the time of the record, those it
/// ended (a `cancel` or a newer debounce of their key), those that started since the last record, and
/// the held effects among these that opened a throttle's interval.
public struct TimerNote: Sendable, Hashable {
    /// The effects of the event that wait: each one's position, delay and stored bytes (or why it did
    /// not encode, which fails the append).
    public var started: [Started]
    /// The timers the event ended, by the version and position that name them.
    public var ended: [TimerName]
    /// The timers that became due and started since the last record, by name.
    public var fired: [TimerName]
    /// The held throttled effects that started since the last record, by name: each opened its key's
    /// next interval, a ``TimerKind/window`` due its delay after this record's time.
    public var renewed: [TimerName]
    /// The time of the record on the loop's ``EpochClock``, set as it is written: a timer it starts is
    /// due this long after it plus its delay.
    public var recordedAt: Duration?

    /// An effect that waits.
    public struct Started: Sendable, Hashable {
        /// Its position among its event's effects.
        public var index: Int
        /// How long it waits.
        public var delay: Duration
        /// Its stored bytes, or why they could not be made.
        public var payload: Result<[UInt8], CodecError>
        /// What it waits for.
        public var kind: TimerKind

        /// Creates one.
        public init(index: Int, delay: Duration, payload: Result<[UInt8], CodecError>, kind: TimerKind = .wait) {
            self.index = index
            self.delay = delay
            self.payload = payload
            self.kind = kind
        }
    }

    /// Creates a note.
    public init(
        started: [Started] = [],
        ended: [TimerName] = [],
        fired: [TimerName] = [],
        renewed: [TimerName] = [],
        recordedAt: Duration? = nil
    ) {
        self.started = started
        self.ended = ended
        self.fired = fired
        self.renewed = renewed
        self.recordedAt = recordedAt
    }

    /// Whether there is nothing to record.
    public var isEmpty: Bool { started.isEmpty && ended.isEmpty && fired.isEmpty && renewed.isEmpty }

    /// Whether the note needs the record's time: it starts a timer, or a held effect opened an interval.
    public var isTimed: Bool { !started.isEmpty || !renewed.isEmpty }

    /// Whether the note holds what records before throttles were kept could not say: a timer of
    /// another kind than ``TimerKind/wait``, or a renewal.
    public var isThrottled: Bool { !renewed.isEmpty || started.contains { $0.kind != .wait } }
}

/// What names a timer in its stream: the version of the event that asked for it, and its position
/// among that event's effects.
public struct TimerName: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The event's version.
    public var version: UInt64
    /// The effect's position.
    public var index: Int

    /// Creates a name.
    @inlinable
    public init(version: UInt64, index: Int) {
        self.version = version
        self.index = index
    }

    /// `@version#index`.
    public var description: String { "@\(version)#\(index)" }

    /// In the order the timers were asked for.
    public static func < (lhs: TimerName, rhs: TimerName) -> Bool {
        (lhs.version, lhs.index) < (rhs.version, rhs.index)
    }
}

extension DurableTimer {
    /// Its name in the stream.
    @inlinable
    public var name: TimerName { TimerName(version: version, index: index) }
}

extension RecordedTimer {
    /// Its name in the stream.
    @inlinable
    public var name: TimerName { TimerName(version: version, index: index) }
}

extension DurableTimer: Sendable where Effect: Sendable {}
extension DurableTimer: Equatable where Effect: Equatable {}
