/// The event of a program that separates what the outside world may send (inputs) from what only its
/// own effect handlers produce (feedback).
///
/// A program whose event is a `Message` runs in a `LoopStore` (`LoopRuntime`), whose sending surface takes
/// only inputs: a caller cannot forge a feedback event, because it has no way to send one.
///
/// ```swift
/// typealias Event = Message<Numbers.Input, Numbers.Feedback>
/// static func update(_ state: inout State, _ event: Event) -> [Effect] {
///     switch event {
///     case .input(.add(let value)): ...
///     case .feedback(.checked(let total, let isPrime)): ...
///     }
/// }
/// ```
public enum Message<Input, Feedback> {
    /// Sent from outside the program.
    case input(Input)
    /// Sent by one of the program's effect handlers.
    case feedback(Feedback)

    /// The input, if this is one.
    @inlinable
    public var input: Input? {
        if case .input(let input) = self { input } else { nil }
    }

    /// The feedback, if this is one.
    @inlinable
    public var feedback: Feedback? {
        if case .feedback(let feedback) = self { feedback } else { nil }
    }
}

extension Message: Equatable where Input: Equatable, Feedback: Equatable {}
extension Message: Hashable where Input: Hashable, Feedback: Hashable {}
extension Message: Sendable where Input: Sendable, Feedback: Sendable {}
