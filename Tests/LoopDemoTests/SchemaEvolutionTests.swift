import LoopCore
import LoopDemo
import LoopPersistence
import Testing

/// A later release of the demo whose events changed shape: `tick` renamed `clockTicked`, and `exited`
/// split into `succeeded` and `failed`. Its store, written by today's demo (the checked-in fixture), still
/// replays through an upcaster from today's form; without one, the replay names the stream, the version
/// and the type it could not read.
@Suite struct SchemaEvolutionTests {
    /// The events of the later release.
    enum NextEvent: Codable, Equatable, Sendable {
        case submit(JobRunner.Spec)
        case request(JobRunner.Spec, replyTo: ReplyTo<String>)
        case succeeded(name: String, attempt: Int, output: String)
        case failed(name: String, attempt: Int, status: Int32, output: String, errors: String)
        case timedOut(name: String, attempt: Int)
        case runFailed(name: String, attempt: Int, reason: String)
        case retryDue(name: String, attempt: Int)
        case cancel(String)
        case statusRequested
        case metricsRequested
        case clockTicked
        case invalidInput(String)
        case inputEnded
        case ignored
        case shutdown

        /// The upcaster: today's event in the later form.
        init(_ event: JobRunner.Event) {
            switch event {
            case .submit(let spec): self = .submit(spec)
            case .request(let spec, let replyTo): self = .request(spec, replyTo: replyTo)
            case .exited(let name, let attempt, 0, let output, _):
                self = .succeeded(name: name, attempt: attempt, output: output)
            case .exited(let name, let attempt, let status, let output, let errors):
                self = .failed(name: name, attempt: attempt, status: status, output: output, errors: errors)
            case .timedOut(let name, let attempt): self = .timedOut(name: name, attempt: attempt)
            case .runFailed(let name, let attempt, let reason):
                self = .runFailed(name: name, attempt: attempt, reason: reason)
            case .retryDue(let name, let attempt): self = .retryDue(name: name, attempt: attempt)
            case .cancel(let name): self = .cancel(name)
            case .statusRequested: self = .statusRequested
            case .metricsRequested: self = .metricsRequested
            case .tick: self = .clockTicked
            case .invalidInput(let line): self = .invalidInput(line)
            case .inputEnded: self = .inputEnded
            case .ignored: self = .ignored
            case .shutdown: self = .shutdown
            }
        }

        /// The same logic runs the later release: its update reads each event as today's demo did.
        var asToday: JobRunner.Event {
            switch self {
            case .submit(let spec): .submit(spec)
            case .request(let spec, let replyTo): .request(spec, replyTo: replyTo)
            case .succeeded(let name, let attempt, let output):
                .exited(name: name, attempt: attempt, status: 0, output: output)
            case .failed(let name, let attempt, let status, let output, let errors):
                .exited(name: name, attempt: attempt, status: status, output: output, errors: errors)
            case .timedOut(let name, let attempt): .timedOut(name: name, attempt: attempt)
            case .runFailed(let name, let attempt, let reason): .runFailed(name: name, attempt: attempt, reason: reason)
            case .retryDue(let name, let attempt): .retryDue(name: name, attempt: attempt)
            case .cancel(let name): .cancel(name)
            case .statusRequested: .statusRequested
            case .metricsRequested: .metricsRequested
            case .clockTicked: .tick
            case .invalidInput(let line): .invalidInput(line)
            case .inputEnded: .inputEnded
            case .ignored: .ignored
            case .shutdown: .shutdown
            }
        }
    }

    static let today = JobRunner.durableProgram(limit: 3)
    static let next = DurableProgram<JobRunner.State, NextEvent, JobRunner.Effect>(
        initial: today.initial,
        update: Update { state, event in today.update(&state, event.asToday) }
    )

    func fixture() throws -> FileEventStore {
        try FileEventStore(directory: DeployCheckTests.fixture, options: .init(readOnly: true))
    }

    @Test func theStoreTodaysDemoWroteReplaysInTheLaterFormThroughAnUpcaster() async throws {
        let store = try fixture()
        let events = VersionedCodec(version: 2, codec: BinaryCodec<NextEvent>())
            .upcasting(VersionedCodec(version: 1, codec: BinaryCodec<JobRunner.Event>()), NextEvent.init)
        let later = try await StoreReplay.run(
            store: store,
            stream: JobRunner.stream,
            program: Self.next,
            events: events,
            states: BinaryCodec<JobRunner.State>()
        )
        let now = try await StoreReplay.run(store: store, stream: JobRunner.stream, program: Self.today)
        #expect(later.events == 38 && later.state == now.state)
        // Both shapes the upcaster maps are in the fixture.
        var cases: Set<String> = []
        for try await stored in store.events(of: JobRunner.stream) {
            guard let event = try? BinaryCodec<JobRunner.Event>().decode(stored.payload) else { continue }
            cases.insert(String(describing: NextEvent(event)).prefix { $0 != "(" }.description)
        }
        #expect(cases.isSuperset(of: ["clockTicked", "succeeded", "failed"]), "\(cases)")
        await store.close()
    }

    @Test func withoutTheUpcasterTheReplayNamesTheStreamTheVersionAndTheType() async throws {
        let store = try fixture()
        let failure = await #expect(throws: StoreReplay.Failure.self) {
            try await StoreReplay.run(
                store: store,
                stream: JobRunner.stream,
                program: Self.next,
                events: VersionedCodec(version: 2, codec: BinaryCodec<NextEvent>()),
                states: BinaryCodec<JobRunner.State>()
            )
        }
        #expect(
            failure?.description
                == "stream 'jobs': the event at version 1 does not decode: NextEvent in the form of version 1, "
                + "and this release (version 2) has no upcaster from it"
        )
        await store.close()
    }

    @Test func aLaterFormIsTaggedAndReadBackAndALaterOneThanTheCodecIsRefused() throws {
        let second = VersionedCodec(version: 2, codec: BinaryCodec<NextEvent>())
        let bytes = try second.encode(.clockTicked)
        #expect(bytes.starts(with: [0xFE, 0x53, 0x56, 2]))
        #expect(try second.decode(bytes) == .clockTicked)
        // The first version writes what the plain codec writes.
        let first = VersionedCodec(version: 1, codec: BinaryCodec<JobRunner.Event>())
        #expect(try first.encode(.tick) == BinaryCodec<JobRunner.Event>().encode(.tick))
        #expect(throws: CodecError.self) { try first.decode(bytes) }
        #expect(throws: CodecError.self) { try second.decode([0xFE, 0x53, 0x56, 0x80]) }
    }
}
