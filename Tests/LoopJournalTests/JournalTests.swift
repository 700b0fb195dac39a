import EffectHandlers
import Foundation
import LoopCore
import LoopJournal
import LoopRuntime
import Testing

/// A small journaled program: a ledger of named balances.
enum Ledger {
    struct State: Codable, Equatable, Sendable {
        var balances: [String: Int] = [:]
        var history: [String] = []
    }

    enum Event: Codable, Equatable, Sendable {
        case deposit(String, Int)
        case withdraw(String, Int)
    }

    static func update(_ state: inout State, _ event: Event) -> [String] {
        switch event {
        case .deposit(let name, let amount):
            state.balances[name, default: 0] += amount
            state.history.append("+\(amount) \(name)")
            return []
        case .withdraw(let name, let amount):
            state.balances[name, default: 0] -= amount
            state.history.append("-\(amount) \(name)")
            return ["withdrew \(amount) from \(name)"]
        }
    }

    static let program = Program(first: First(state: State()), update: Update(update))

    static func events(_ count: Int) -> [Event] {
        (0..<count).map { $0.isMultiple(of: 3) ? .withdraw("n\($0 % 7)", $0) : .deposit("n\($0 % 7)", $0) }
    }
}

@Suite struct JournalTests {
    func temporaryPath(_ name: String = #function) -> String {
        let path = NSTemporaryDirectory() + "effectloop-\(name.filter(\.isLetter))-\(UUID().uuidString).jsonl"
        return path
    }

    /// Runs the ledger through a real loop with a journal; returns the loop's final state.
    func record(_ events: [Ledger.Event], to path: String, digestEvery: Int) async throws -> Ledger.State {
        let journal = try JSONLinesJournal<Ledger.Event>(path: path)
        let recorder = JournalRecorder<Ledger.State, Ledger.Event, String>(journal: journal, digestEvery: digestEvery)
        let loop = Loop(program: Ledger.program, effects: EffectRouter(), observer: recorder)
        let run = Task { try await loop.run() }
        while !loop.isRunning { await Task.yield() }
        for event in events { loop.send(event) }
        loop.stop()
        _ = try await run.value
        #expect(recorder.recorded == events.count)
        #expect(recorder.failures == 0)
        return loop.state
    }

    @Test func aRecordedRunReplaysToTheSameStateWithEveryDigestMatching() async throws {
        let path = temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let events = Ledger.events(250)
        let final = try await record(events, to: path, digestEvery: 10)
        let contents = try JournalReader.read(path, as: Ledger.Event.self)
        #expect(contents.warnings == [])
        #expect(contents.records.map(\.event) == events)
        #expect(contents.records.map(\.sequence) == Array(1...250))
        #expect(contents.records.filter { $0.digest != nil }.count == 25)
        let replayed = try Ledger.program.update.replay(from: Ledger.program.first, journal: contents.records)
        #expect(replayed.state == final)
        #expect(replayed == Ledger.program.replay(events))
    }

    @Test func anEditedEventIsCaughtAtTheFirstDigestAfterIt() async throws {
        let path = temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        _ = try await record(Ledger.events(50), to: path, digestEvery: 10)
        var lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map(String.init)
        lines[22] = lines[22].replacingOccurrences(of: "\"n", with: "\"x")
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: false, encoding: .utf8)
        let contents = try JournalReader.read(path, as: Ledger.Event.self)
        #expect(throws: JournalError.self) {
            try Ledger.program.update.replay(from: Ledger.program.first, journal: contents.records)
        }
        do {
            _ = try Ledger.program.update.replay(from: Ledger.program.first, journal: contents.records)
        } catch let error as JournalError {
            #expect(error.divergingSequence == 30)
            #expect(error.description.hasPrefix("replay diverges at event 30: recorded digest "))
        }
    }

    @Test func aTornLastLineIsAWarningAndTheRestReplays() throws {
        let good = #"{"seq":1,"event":{"deposit":{"_0":"a","_1":5}}}"# + "\n"
        let torn = #"{"seq":2,"event":{"depo"#
        let contents = try JournalReader.parse(Array((good + torn).utf8), as: Ledger.Event.self)
        #expect(contents.records == [JournalRecord(sequence: 1, event: .deposit("a", 5))])
        #expect(contents.warnings == ["line 2 is incomplete (a torn write) and was ignored"])
    }

    @Test func aMalformedLineInTheMiddleIsAnErrorNamingIt() {
        let text =
            #"{"seq":1,"event":{"deposit":{"_0":"a","_1":5}}}"# + "\nnot json\n"
            + #"{"seq":3,"event":{"deposit":{"_0":"a","_1":5}}}"# + "\n"
        #expect(throws: JournalError.self) { try JournalReader.parse(Array(text.utf8), as: Ledger.Event.self) }
        do {
            _ = try JournalReader.parse(Array(text.utf8), as: Ledger.Event.self)
        } catch {
            #expect(error.line == 2)
            #expect(error.description.hasPrefix("line 2 is not a journal record"))
        }
    }

    @Test func aSequenceGapIsAnErrorNamingTheLine() {
        let text =
            #"{"seq":1,"event":{"deposit":{"_0":"a","_1":5}}}"# + "\n"
            + #"{"seq":3,"event":{"deposit":{"_0":"a","_1":5}}}"# + "\n"
        do {
            _ = try JournalReader.parse(Array(text.utf8), as: Ledger.Event.self)
            Issue.record("a gap was accepted")
        } catch {
            #expect(error == .sequenceGap(line: 2, expected: 2, found: 3))
        }
    }

    @Test func digestsAreStableAndSensitive() throws {
        var one = Ledger.State()
        var two = Ledger.State()
        for name in ["a", "b", "c", "d", "e"] { one.balances[name] = name.count }
        for name in ["e", "d", "c", "b", "a"] { two.balances[name] = name.count }
        #expect(try StateDigest.of(one) == StateDigest.of(two))
        #expect(try StateDigest.of(one).count == 16)
        two.balances["a"] = 2
        #expect(try StateDigest.of(one) != StateDigest.of(two))
    }

    @Test func aJournalThatCannotBeOpenedIsAClearError() {
        #expect(throws: JournalError.cannotOpen("/nonexistent-dir/journal.jsonl", errno: 2)) {
            try JSONLinesJournal<Ledger.Event>(path: "/nonexistent-dir/journal.jsonl")
        }
    }
}
