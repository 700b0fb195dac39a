public import LoopCore

/// One thing a spec expects of an outcome: its state, its effects, or a property of either.
///
/// Pass one or more to ``UpdateSpec/When/then(_:fileID:filePath:line:column:)``:
///
/// ```swift
/// spec.given(State(count: 1)).when(.increment).then(.state(State(count: 2)), .noEffects)
/// ```
public struct Then<State, Effect>: Sendable {
    @usableFromInline
    let check: @Sendable (Next<State, Effect>) -> [Difference]

    /// Creates an expectation from a check that returns the differences it finds, none when it holds.
    public init(_ check: @escaping @Sendable (Next<State, Effect>) -> [Difference]) {
        self.check = check
    }

    /// The outcome has no effects.
    public static var noEffects: Then {
        Then { next in
            next.effects.isEmpty
                ? [] : [Difference(path: "effects", expected: "no effects", actual: Rendering.of(next.effects))]
        }
    }

    /// The state satisfies `predicate`, described by `description` in a failure report.
    public static func state(
        _ description: String,
        _ predicate: @escaping @Sendable (State) -> Bool
    ) -> Then {
        Then { next in
            predicate(next.state)
                ? [] : [Difference(path: "state", expected: description, actual: Rendering.of(next.state))]
        }
    }

    /// The effects satisfy `predicate`, described by `description` in a failure report.
    public static func effects(
        _ description: String,
        _ predicate: @escaping @Sendable ([Effect]) -> Bool
    ) -> Then {
        Then { next in
            predicate(next.effects)
                ? [] : [Difference(path: "effects", expected: description, actual: Rendering.of(next.effects))]
        }
    }
}

extension Then where State: Equatable & Sendable {
    /// The state equals `expected`; a failure names each differing field.
    public static func state(_ expected: State) -> Then {
        Then { next in
            guard next.state != expected else { return [] }
            return Self.differences(expected, next.state, at: "state")
        }
    }
}

extension Then where Effect: Equatable & Sendable {
    /// The effects are exactly `expected`, in this order; a failure names each differing element.
    public static func effects(_ expected: [Effect]) -> Then {
        Then { next in
            guard next.effects != expected else { return [] }
            return Self.differences(expected, next.effects, at: "effects")
        }
    }

    /// The effects are `expected` in any order: the same elements, each as often.
    public static func effectsInAnyOrder(_ expected: [Effect]) -> Then {
        Then { next in
            let (missing, unexpected) = Self.unmatched(expected, next.effects)
            return missing.map {
                Difference(path: "effects (any order)", expected: Rendering.of($0), actual: Rendering.nothing)
            }
                + unexpected.map {
                    Difference(path: "effects (any order)", expected: Rendering.nothing, actual: Rendering.of($0))
                }
        }
    }

    /// The effects include each of `expected` (each as often), in any order, among any others.
    public static func containsEffects(_ expected: [Effect]) -> Then {
        Then { next in
            Self.unmatched(expected, next.effects).missing.map {
                Difference(path: "effects (contains)", expected: Rendering.of($0), actual: Rendering.nothing)
            }
        }
    }

    /// The elements of `expected` that `actual` lacks and those it has beyond them, matched one to one.
    static func unmatched(_ expected: [Effect], _ actual: [Effect]) -> (missing: [Effect], unexpected: [Effect]) {
        var unexpected = actual
        var missing: [Effect] = []
        for effect in expected {
            if let index = unexpected.firstIndex(of: effect) {
                unexpected.remove(at: index)
            } else {
                missing.append(effect)
            }
        }
        return (missing, unexpected)
    }
}

extension Then {
    /// The structural differences of two values known to be unequal; never empty.
    static func differences<Value>(_ expected: Value, _ actual: Value, at path: String) -> [Difference] {
        let found = Difference.between(expected, actual, at: path)
        guard found.isEmpty else { return found }
        // Unequal values that render identically (a custom description hides the difference).
        return [Difference(path: path, expected: Rendering.of(expected), actual: Rendering.of(actual) + " (not equal)")]
    }
}
