// `make lint`'s check that Docs/Architecture.md's module table says what Package.swift declares: one
// row per target (test targets aside), and in its "depends on" column exactly the target's declared
// dependencies. Run from the repository's root with the output of `swift package dump-package` on
// standard input; exits 1, naming each difference, when they differ.
import Foundation

struct Manifest: Decodable {
    struct Target: Decodable {
        var name: String
        var type: String
        var dependencies: [[String: [Dependency?]]]
    }
    /// A dependency's name, or the condition beside it (ignored).
    enum Dependency: Decodable {
        case name(String)
        case other
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            self = (try? container.decode(String.self)).map(Dependency.name) ?? .other
        }
    }
    var targets: [Target]
}

func fail(_ problems: [String]) -> Never {
    for problem in problems { FileHandle.standardError.write(Data("architecture check: \(problem)\n".utf8)) }
    exit(1)
}

let input = FileHandle.standardInput.readDataToEndOfFile()
guard let manifest = try? JSONDecoder().decode(Manifest.self, from: input) else {
    fail(["cannot read `swift package dump-package`'s output on standard input"])
}
var declared: [String: Set<String>] = [:]
for target in manifest.targets where target.type != "test" {
    var names: Set<String> = []
    for dependency in target.dependencies {
        for case .name(let name)? in dependency.values.first ?? [] { names.insert(name) }
    }
    declared[target.name] = names
}

let path = "Docs/Architecture.md"
guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { fail(["cannot read \(path)"]) }
/// The names between backticks in `cell`.
func names(_ cell: Substring) -> Set<String> {
    let parts = cell.split(separator: "`", omittingEmptySubsequences: false)
    return Set(stride(from: 1, to: parts.count, by: 2).map { String(parts[$0]) })
}
guard let heading = text.range(of: "## Modules and what each may import") else {
    fail(["\(path) has no section \"Modules and what each may import\""])
}
var documented: [String: Set<String>] = [:]
var problems: [String] = []
for line in text[heading.upperBound...].split(separator: "\n").drop(while: { !$0.hasPrefix("| module ") }).dropFirst(2)
{
    guard line.hasPrefix("|") else { break }
    let cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
        $0.trimmingCharacters(in: .whitespaces)
    }
    guard cells.count >= 5, let module = names(Substring(cells[1])).first, names(Substring(cells[1])).count == 1 else {
        problems.append("a row of the module table names no single module: \(line)")
        continue
    }
    if documented[module] != nil { problems.append("`\(module)` has two rows") }
    documented[module] = names(Substring(cells[3]))
}
for (target, dependencies) in declared.sorted(by: { $0.key < $1.key }) {
    guard let listed = documented[target] else {
        problems.append("`\(target)` is a target of Package.swift with no row in \(path)'s module table")
        continue
    }
    if listed != dependencies {
        problems.append(
            "`\(target)` depends on \(dependencies.sorted()) in Package.swift, but its row lists \(listed.sorted())"
        )
    }
}
for module in documented.keys.sorted() where declared[module] == nil {
    problems.append("`\(module)` has a row in \(path)'s module table but is no target of Package.swift")
}
if !problems.isEmpty { fail(problems) }
print("architecture check: \(declared.count) targets, each as Docs/Architecture.md says")
