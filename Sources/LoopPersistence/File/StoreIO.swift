#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// The calls through which the file store writes its log: the system's, or a test's that fails them
/// the way a full or failing disk does (ENOSPC, EIO), to prove that no half record stays and nothing
/// acknowledged is lost. Each returns 0 (or the bytes written) on success and `-errno` on failure.
package protocol StoreIO: Sendable {
    /// `pwrite(2)`: writes `bytes` at `offset`; may write fewer.
    func write(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int) -> Int
    /// `fdatasync(2)`.
    func sync(_ descriptor: Int32) -> Int32
    /// `ftruncate(2)`.
    func truncate(_ descriptor: Int32, to size: Int) -> Int32
}

/// The system calls themselves.
package struct SystemIO: StoreIO {
    package init() {}

    package func write(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int) -> Int {
        let written = pwrite(descriptor, bytes.baseAddress, bytes.count, off_t(offset))
        return written < 0 ? -Int(errno) : written
    }

    package func sync(_ descriptor: Int32) -> Int32 {
        #if canImport(Darwin)
        fsync(descriptor) == 0 ? 0 : -errno
        #else
        fdatasync(descriptor) == 0 ? 0 : -errno
        #endif
    }

    package func truncate(_ descriptor: Int32, to size: Int) -> Int32 {
        ftruncate(descriptor, off_t(size)) == 0 ? 0 : -errno
    }
}

/// Plain file operations the store needs, each failing with an ``EventStoreError`` that names the file.
enum Files {
    static func error(_ operation: String, code: Int32 = errno) -> EventStoreError {
        EventStoreError(.io(code: code, operation: operation))
    }

    /// Opens `path`, creating it when `create`; for reading only when `readOnly`.
    static func openFile(_ path: String, create: Bool, readOnly: Bool = false) throws(EventStoreError) -> Int32 {
        let flags = (readOnly ? O_RDONLY : O_RDWR) | O_CLOEXEC | (create ? O_CREAT : 0)
        let descriptor = path.withCString { open($0, flags, 0o644) }
        guard descriptor >= 0 else { throw error("open \(path)") }
        return descriptor
    }

    /// The size of an open file.
    static func fileSize(_ descriptor: Int32, path: String) throws(EventStoreError) -> Int {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw error("stat \(path)") }
        return Int(status.st_size)
    }

    /// Reads exactly `count` bytes at `offset`, or fewer at the end of the file.
    static func readBytes(
        _ descriptor: Int32,
        count: Int,
        at offset: Int,
        path: @autoclosure () -> String
    ) throws(EventStoreError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress.map { $0 + done }, count - done, off_t(offset + done))
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw error("read \(path()) at offset \(offset)")
            }
            if got == 0 { break }
            done += got
        }
        if done < count { bytes.removeLast(count - done) }
        return bytes
    }

    /// Closes a descriptor.
    static func release(_ descriptor: Int32) {
        _ = close(descriptor)
    }

    /// Unlocks a descriptor `flock`ed by this process, then closes it. Closing alone is not enough: a
    /// child being spawned by another thread holds a copy of every descriptor until its `exec` (close-
    /// on-exec closes them only then), and the lock, which belongs to the open file, holds as long as
    /// any copy does, so the next open of the directory would find it taken by this very process.
    static func unlockAndRelease(_ descriptor: Int32) {
        _ = flock(descriptor, LOCK_UN)
        _ = close(descriptor)
    }

    /// Creates `path` as a directory unless it exists.
    static func makeDirectory(_ path: String) throws(EventStoreError) {
        guard path.withCString({ mkdir($0, 0o755) }) == 0 || errno == EEXIST else { throw error("create \(path)") }
    }

    /// Flushes a directory's entries (new files, renames) to disk.
    static func syncDirectory(_ path: String) throws(EventStoreError) {
        let descriptor = path.withCString { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard descriptor >= 0 else { throw error("open \(path)") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw error("sync \(path)") }
    }

    /// The names in a directory.
    static func names(in path: String) throws(EventStoreError) -> [String] {
        guard let directory = path.withCString({ opendir($0) }) else { throw error("list \(path)") }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            names.append(name)
        }
        return names
    }
}
