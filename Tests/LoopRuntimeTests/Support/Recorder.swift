import LoopTesting

/// The runtime's tests record activities with the observer `LoopTesting` ships.
typealias Recorder<Event: Equatable & Sendable, Effect: Equatable & Sendable> = RecordingObserver<Event, Effect>
typealias Happened<Event: Equatable & Sendable, Effect: Equatable & Sendable> = RecordedActivity<Event, Effect>
