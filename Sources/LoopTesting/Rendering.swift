/// How the diff and the specs show a value: short, Swift-like, and the same on every run.
///
/// Strings and characters are quoted, enum cases written with a leading dot (`.run("a")`), optionals
/// unwrapped (or `nil`), and sets and dictionaries listed in sorted order so a report does not change
/// between runs. A type with its own `description` (other than a collection) is shown by it.
enum Rendering {
    /// Shown where one side has no element at a place.
    static let nothing = "nothing"
    /// Renderings longer than this are cut, so a report about a huge state stays readable.
    static let maximumLength = 240
    /// How deep rendering goes before it falls back to the value's own description.
    static let maximumDepth = 16

    static func of(_ value: Any) -> String {
        let rendering = render(value, depth: 0)
        guard rendering.count > maximumLength else { return rendering }
        return String(rendering.prefix(maximumLength)) + "…"
    }

    /// Whether the value is shown (and compared) by its own `description` rather than by its parts.
    static func isDescribedByItself(_ value: Any, _ mirror: Mirror) -> Bool {
        switch mirror.displayStyle {
        case .collection, .dictionary, .set, .optional, .tuple, .enum: false
        default: value is any CustomStringConvertible
        }
    }

    private static func render(_ value: Any, depth: Int) -> String {
        switch value {
        case let string as String: return String(reflecting: string)
        case let character as Character: return String(reflecting: character)
        case let substring as Substring: return String(reflecting: substring)
        default: break
        }
        let mirror = Mirror(reflecting: value)
        if depth >= maximumDepth || isDescribedByItself(value, mirror) { return String(describing: value) }
        let parts = mirror.children.map { (label: $0.label, value: $0.value) }
        switch mirror.displayStyle {
        case .optional:
            return parts.first.map { render($0.value, depth: depth + 1) } ?? "nil"
        case .enum:
            guard let payload = parts.first, let name = payload.label else { return "." + String(describing: value) }
            let inner = render(payload.value, depth: depth + 1)
            return "." + name + (inner.hasPrefix("(") ? inner : "(\(inner))")
        case .collection:
            return "[" + parts.map { render($0.value, depth: depth + 1) }.joined(separator: ", ") + "]"
        case .set:
            return "Set([" + parts.map { render($0.value, depth: depth + 1) }.sorted().joined(separator: ", ") + "])"
        case .dictionary:
            guard !parts.isEmpty else { return "[:]" }
            let entries = parts.map { entry -> String in
                let pair = Mirror(reflecting: entry.value).children.map { render($0.value, depth: depth + 1) }
                return pair.joined(separator: ": ")
            }
            return "[" + entries.sorted().joined(separator: ", ") + "]"
        case .tuple:
            return "(" + fields(parts, depth: depth) + ")"
        case .struct, .class:
            return String(describing: mirror.subjectType) + "(" + fields(parts, depth: depth) + ")"
        default:
            return String(describing: value)
        }
    }

    private static func fields(_ parts: [(label: String?, value: Any)], depth: Int) -> String {
        parts.map { part in
            let rendered = render(part.value, depth: depth + 1)
            guard let label = part.label, !label.hasPrefix(".") else { return rendered }
            return label + ": " + rendered
        }
        .joined(separator: ", ")
    }
}
