/// How the diff and the specs show a value: short, Swift-like, and the same on every run.
enum Rendering {
    /// Shown where one side has no element at a place.
    static let nothing = "nothing"
    /// Renderings longer than this are cut, so a report about a huge state stays readable.
    static let maximumLength = 240

    /// Strings and characters quoted, enum cases with a leading dot, optionals unwrapped (or `nil`).
    static func of(_ value: Any) -> String {
        let rendering = render(value)
        guard rendering.count > maximumLength else { return rendering }
        return String(rendering.prefix(maximumLength)) + "…"
    }

    private static func render(_ value: Any) -> String {
        switch value {
        case let string as String: return String(reflecting: string)
        case let character as Character: return String(reflecting: character)
        case let substring as Substring: return String(reflecting: substring)
        default: break
        }
        let mirror = Mirror(reflecting: value)
        switch mirror.displayStyle {
        case .optional:
            guard let wrapped = mirror.children.first else { return "nil" }
            return render(wrapped.value)
        case .enum where !(value is any CustomStringConvertible):
            return "." + String(describing: value)
        default:
            return String(describing: value)
        }
    }
}
