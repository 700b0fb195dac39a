import LoopSupport

#if canImport(Glibc)
import Glibc
#endif
#if EFFECTLOOP_COUNT_LOCKS
import LoopRuntime
import Synchronization
#endif

/// Timing, medians and process memory for the benchmark.
enum Measure {
    #if EFFECTLOOP_COUNT_LOCKS
    /// Whether this build counts lock acquisitions (`make bench-locks`).
    static let countsLocks = true
    /// Lock acquisitions so far, across every lock of the runtime.
    static var lockAcquisitions: Int { LoopRuntime.lockAcquisitions.load(ordering: .relaxed) }
    #else
    /// Whether this build counts lock acquisitions (`make bench-locks`).
    static let countsLocks = false
    /// Lock acquisitions so far: not counted in this build.
    static var lockAcquisitions: Int { 0 }
    #endif

    /// Seconds `body` takes.
    static func seconds(_ body: () async throws -> Void) async rethrows -> Double {
        let start = ContinuousClock.now
        try await body()
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    /// Processor seconds (user and system, every thread) the process has used so far.
    static func processorSeconds() -> Double {
        var usage = rusage()
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        return sorted.count % 2 == 1
            ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }

    /// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`), or 0 when unreadable.
    static func status(_ field: String) -> Int {
        guard let status = FileContents.text(at: "/proc/self/status") else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix(field + ":") {
            let digits = line.dropFirst(field.count + 1).filter(\.isNumber)
            return (Int(String(digits)) ?? 0) * 1_024
        }
        return 0
    }

    /// Resets the peak resident size (`VmHWM`) to the current one, so a later reading is this phase's
    /// peak (Linux's `/proc/self/clear_refs`).
    static func resetPeak() {
        let descriptor = open("/proc/self/clear_refs", O_WRONLY)
        guard descriptor >= 0 else { return }
        _ = write(descriptor, "5", 1)
        close(descriptor)
    }

    /// Asks the allocator to give freed memory back, so RSS reflects what is still in use.
    static func trimHeap() {
        _ = glibcMallocTrim(0)
    }

    /// Pins the calling thread to `processor` (modulo the processors there are), where the system allows it.
    static func pin(toProcessor processor: Int) {
        let processors = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
        var set = cpu_set_t()
        withUnsafeMutableBytes(of: &set) { bytes in
            let target = processor % processors
            bytes[target / 8] |= UInt8(1 << (target % 8))
        }
        // glibc's `sched_setaffinity`, which the Glibc module does not export (it needs _GNU_SOURCE).
        typealias SetAffinity = @convention(c) (pid_t, Int, UnsafeRawPointer) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "sched_setaffinity") else { return }
        _ = withUnsafeBytes(of: &set) { bytes -> Int32 in
            guard let base = bytes.baseAddress else { return -1 }
            return unsafeBitCast(symbol, to: SetAffinity.self)(0, bytes.count, base)
        }
    }

    /// Writes `text` to standard error in one call.
    static func printError(_ text: String) {
        var text = text
        text.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
    }
}

/// glibc's `malloc_trim`, which the Glibc module does not export (it is declared in `malloc.h`).
@_silgen_name("malloc_trim")
private func glibcMallocTrim(_ pad: Int) -> Int32
