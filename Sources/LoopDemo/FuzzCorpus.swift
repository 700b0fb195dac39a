internal import LoopCore
internal import LoopJournal

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// What the fuzz targets do with one input; unit tests call the same functions on the corpus.
public enum FuzzEntry {
    /// Parses `bytes` as a line of demo input.
    public static func command(_ bytes: [UInt8]) {
        _ = Command.event(for: String(decoding: bytes, as: UTF8.self))
    }

    /// Reads `bytes` as a journal of demo events and replays what it holds.
    public static func journal(_ bytes: [UInt8]) {
        guard let contents = try? JournalReader.parse(bytes, as: JobRunner.Event.self) else { return }
        let program = JobRunner.program(limit: 3)
        _ = try? program.update.replay(from: program.first, journal: contents.records)
    }
}

/// Runs fuzz inputs (files, or every file in a directory) through a fuzz target's entry point once:
/// how the fuzz targets replay their corpus outside libFuzzer, and how crashes found stay fixed.
public enum FuzzCorpus {
    /// Calls `body` with the bytes of each file in `paths` (directories are expanded); prints a count.
    public static func replay(_ paths: some Sequence<String>, _ body: ([UInt8]) -> Void) {
        var count = 0
        for path in paths {
            for file in files(at: path) {
                body(read(file))
                count += 1
            }
        }
        print("replayed \(count) inputs")
    }

    /// The regular files at `path`: itself, or those directly inside it, sorted.
    public static func files(at path: String) -> [String] {
        guard let names = FileSystem.entries(of: path) else { return [path] }
        return names.filter { !$0.hasPrefix(".") }.map { path + "/" + $0 }.sorted()
    }

    /// The bytes of the file at `path` (empty if it cannot be read).
    public static func read(_ path: String) -> [UInt8] {
        FileSystem.bytes(at: path)
    }
}
