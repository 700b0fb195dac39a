// The code of Docs/Journal.md. Each region between `// snippet` and `// end snippet` is one code block of
// the guide, in order, as the guide shows it (`make lint` compares them; `swift .ci/guide-check.swift
// --write` copies them in); `// snippet imports A` shows the block opening with `import A`, which the
// file has at its top. What sits outside the regions is what a block needs around it to compile.

import EffectHandlers
import Foundation
import LoopCore
import LoopJournal
import LoopRuntime
import Testing

struct State: Codable, Equatable, Sendable { var total = 0 }
enum Event: Codable, Equatable, Sendable { case add(Int) }
enum Effect: Equatable, Sendable { case announce(Int) }

let program = Program(
    first: First(state: State()),
    update: Update<State, Event, Effect> { state, event in
        switch event {
        case .add(let value):
            state.total += value
            return [.announce(state.total)]
        }
    }
)
let router = EffectRouter<Effect, Event>()
    .route({ if case .announce(let total) = $0 { total } else { nil } }, to: ClosureSyncEffectHandler { _, _ in })

@Test func aRecordedRunReplaysToTheSameState() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("journal-guide-\(UUID())").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    do {
        // snippet imports LoopJournal
        let journal = try JSONLinesJournal<Event>(path: "\(directory)/journal.jsonl")
        let recorder = JournalRecorder<State, Event, Effect>(
            journal: journal,
            digestEvery: 100,  // a state digest on every 100th record
            forwardingTo: LoopLogger()  // other observers keep working
        )
        let loop = Loop(program: program, effects: router, observer: recorder)
        // end snippet
        let running = Task { try await loop.run() }
        #expect(await loop.waitUntilRunning())
        for value in [1, 2, 3] { loop.send(.add(value)) }
        loop.stop()
        _ = try await running.value
        #expect(loop.state == State(total: 6))
    }
    // snippet
    let contents = try JournalReader.read("\(directory)/journal.jsonl", as: Event.self)
    for warning in contents.warnings { print("warning:", warning) }  // e.g. a torn last line
    let replayed = try program.update.replay(from: program.first, journal: contents.records)
    print(replayed.state)
    // end snippet
    #expect(replayed.state == State(total: 6))
    #expect(contents.warnings.isEmpty)
}
