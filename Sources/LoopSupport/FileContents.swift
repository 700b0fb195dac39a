#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// Reads a whole file with `read(2)`, for `/proc` files and children's logs. (Foundation's
/// `String(contentsOfFile:)` leaks a buffer for an empty file under LeakSanitizer, and cannot read
/// `/proc` files, whose size is reported as 0.)
package enum FileContents {
    /// The file's bytes as UTF-8 text; `nil` if it cannot be opened.
    package static func text(at path: String) -> String? {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            bytes += buffer.prefix(count)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
