import LoopCore
import LoopTesting
import Testing

/// A job queue with enough shape (nested structs, enums with payloads, optionals, collections) to
/// exercise the structural diff and the specs.
enum Jobs {
    enum Status: Equatable, Sendable {
        case queued
        case running(attempt: Int)
        case failed(reason: String, attempts: Int)
    }

    struct Job: Equatable, Sendable {
        var name: String
        var status: Status
        var owner: String?
    }

    struct State: Equatable, Sendable {
        var jobs: [Job] = []
        var limits: [String: Int] = [:]
        var tags: Set<String> = []
        var paused = false
    }

    enum Event: Equatable, Sendable {
        case submit(String)
        case start(String)
        case pause
    }

    enum Effect: Equatable, Sendable {
        case run(String)
        case log(String)
    }

    static func update(_ state: inout State, _ event: Event) -> [Effect] {
        switch event {
        case .submit(let name):
            state.jobs.append(Job(name: name, status: .queued, owner: nil))
            return [.log("queued \(name)")]
        case .start(let name):
            guard let index = state.jobs.firstIndex(where: { $0.name == name }) else { return [] }
            state.jobs[index].status = .running(attempt: 1)
            return [.run(name), .log("started \(name)")]
        case .pause:
            state.paused = true
            return []
        }
    }

    static let spec = UpdateSpecFixture.make()
}

enum UpdateSpecFixture {
    static func make() -> UpdateSpec<Jobs.State, Jobs.Event, Jobs.Effect> {
        UpdateSpec(Update(Jobs.update))
    }
}

/// Runs a spec that is meant to fail. Its report must reach Swift Testing as an issue, which is absorbed
/// here as a known issue (the test fails if none arrives); any other issue still fails the test. The
/// result is returned so the caller asserts on it outside, where a failed expectation counts.
func expectSpecFailure(_ body: () -> SpecResult) -> SpecResult? {
    var result: SpecResult?
    withKnownIssue {
        result = body()
    } matching: { issue in
        issue.comments.contains { $0.rawValue.contains(" difference") && $0.rawValue.contains(": expected ") }
    }
    return result
}

/// The asynchronous form of ``expectSpecFailure(_:)``.
func expectAsyncSpecFailure(_ body: () async -> SpecResult) async -> SpecResult? {
    var result: SpecResult?
    await withKnownIssue {
        result = await body()
    } matching: { issue in
        issue.comments.contains { $0.rawValue.contains(" difference") && $0.rawValue.contains(": expected ") }
    }
    return result
}
