public import LoopCore

/// Several sources run side by side as one.
///
/// Each source runs in a child task until it is exhausted or the merged source is cancelled. A source
/// that throws does not stop the others; the merged source throws the first such error once every
/// source has ended.
public struct MergedSource<Event: Sendable>: EventSource {
    private let sources: [any EventSource<Event>]

    /// Creates a source that runs all of `sources`.
    public init(_ sources: [any EventSource<Event>]) {
        self.sources = sources
    }

    /// Creates a source that runs all of `sources`.
    public init(_ sources: any EventSource<Event>...) {
        self.init(sources)
    }

    /// Runs every source until all have ended.
    public func run(send: Send<Event>) async throws {
        let failure = await withTaskGroup(of: (any Error)?.self) { group in
            for source in sources {
                group.addTask {
                    do {
                        try await source.run(send: send)
                        return nil
                    } catch {
                        return error
                    }
                }
            }
            var first: (any Error)?
            for await error in group where first == nil {
                first = error
            }
            return first
        }
        if let failure { throw failure }
    }
}
