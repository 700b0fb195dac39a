/// Where two values of one type differ, as lines an operator reads (`balance: 27 → 24`,
/// `jobs[2].status: running → done`): found by walking both with `Mirror`, field by field, element by
/// element, and comparing what is left at the leaves by its description.
///
/// For reports such as ``StoreReplay``'s, where a state replayed from the events is compared with the
/// state a snapshot recorded. A dictionary's entries are matched by key; a sequence's by position (one
/// line for a change of count, then each position they share). At most `limit` lines.
@usableFromInline
enum StateDifference {
    @usableFromInline
    static func lines(from old: Any, to new: Any, limit: Int = 8) -> [String] {
        var lines: [String] = []
        compare(old, new, at: "", into: &lines, limit: limit)
        return lines
    }

    private static func compare(_ old: Any, _ new: Any, at path: String, into lines: inout [String], limit: Int) {
        guard lines.count < limit else { return }
        let (before, after) = (Mirror(reflecting: old), Mirror(reflecting: new))
        let leaf = before.children.isEmpty && after.children.isEmpty
        let sameShape = before.displayStyle == after.displayStyle && caseName(old, before) == caseName(new, after)
        guard !leaf, sameShape else {
            if String(describing: old) != String(describing: new) { lines.append(change(at: path, old, new)) }
            return
        }
        switch before.displayStyle {
        case .dictionary:
            let (was, now) = (entries(before), entries(after))
            for key in Set(was.keys).union(now.keys).sorted() where lines.count < limit {
                let place = "\(path)[\(key)]"
                switch (was[key], now[key]) {
                case (let old?, let new?): compare(old, new, at: place, into: &lines, limit: limit)
                case (let old?, nil): lines.append("\(place): \(String(describing: old)) → absent")
                case (nil, let new?): lines.append("\(place): absent → \(String(describing: new))")
                case (nil, nil): break
                }
            }
        case .collection, .set:
            let (was, now) = (Array(before.children), Array(after.children))
            if was.count != now.count {
                lines.append(change(at: path.isEmpty ? "count" : "\(path).count", was.count, now.count))
            }
            for index in 0..<min(was.count, now.count) where lines.count < limit {
                compare(was[index].value, now[index].value, at: "\(path)[\(index)]", into: &lines, limit: limit)
            }
        case .enum, .optional:
            // The same case (or both present): its payload, under the case's name.
            guard let was = before.children.first?.value, let now = after.children.first?.value else {
                lines.append(change(at: path, old, new))
                return
            }
            let name = caseName(old, before).map { path.isEmpty ? $0 : "\(path).\($0)" } ?? path
            compare(was, now, at: name, into: &lines, limit: limit)
        default:
            let (was, now) = (Array(before.children), Array(after.children))
            for index in 0..<min(was.count, now.count) where lines.count < limit {
                let label = was[index].label ?? "\(index)"
                compare(
                    was[index].value,
                    now[index].value,
                    at: path.isEmpty ? label : "\(path).\(label)",
                    into: &lines,
                    limit: limit
                )
            }
        }
    }

    /// One line: what `path` held, and holds now.
    private static func change(at path: String, _ old: Any, _ new: Any) -> String {
        "\(path.isEmpty ? "the state" : path): \(String(describing: old)) → \(String(describing: new))"
    }

    /// An enum value's case name (its description up to the payload); `nil` for other values.
    private static func caseName(_ value: Any, _ mirror: Mirror) -> String? {
        guard mirror.displayStyle == .enum else { return nil }
        let described = String(describing: value)
        return String(described.prefix { $0 != "(" })
    }

    /// A dictionary's entries by their keys' descriptions.
    private static func entries(_ mirror: Mirror) -> [String: Any] {
        var entries: [String: Any] = [:]
        for child in mirror.children {
            let pair = Array(Mirror(reflecting: child.value).children)
            guard pair.count == 2 else { continue }
            entries[String(describing: pair[0].value)] = pair[1].value
        }
        return entries
    }
}
