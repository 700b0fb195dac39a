internal import Dispatch

/// Lets a `@Sendable` closure cancel a dispatch source.
///
/// `@unchecked Sendable` is safe here: the box holds the source in a `let` and exposes only
/// `cancel()`, which Dispatch documents as callable from any thread at any time, any number of times
/// (a dispatch source is an internally synchronized object; the Swift overlay simply lacks the
/// annotation on Linux).
final class DispatchSourceCanceller: @unchecked Sendable {
    private let source: any DispatchSourceProtocol

    init(_ source: any DispatchSourceProtocol) {
        self.source = source
    }

    func cancel() {
        source.cancel()
    }
}
