#if EFFECTLOOP_COUNT_LOCKS
public import Synchronization

/// How many times any ``Locked`` was acquired, in a build with `-DEFFECTLOOP_COUNT_LOCKS` only (the
/// benchmark's `make bench-locks` uses it to count acquisitions per round trip).
@usableFromInline
package let lockAcquisitions = Atomic<Int>(0)
#endif

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A value guarded by a `pthread_mutex_t`, both in one heap allocation.
///
/// Why not `Synchronization.Mutex`: on Linux its lock is invisible to the thread sanitizer, which then
/// reports accesses made inside `withLock` on different threads as races (measured here: 14 reports in
/// the 4-thread stress test, whose exactly-once and order checks all passed). TSan intercepts
/// `pthread_mutex_lock` and `pthread_mutex_unlock`, so with this lock a TSan report means a real race.
/// The value is reached through the buffer's pointer, so accesses carry no dynamic exclusivity check
/// (those cost about 15% of an event in the profile of a class's stored `var`).
///
/// `@unchecked Sendable` is safe: the value is only read or written inside ``withLock(_:)``, between
/// `pthread_mutex_lock` and `pthread_mutex_unlock` of the mutex stored in the same buffer, so every
/// access is serialised and ordered by it; the mutex lives at a stable address for the buffer's whole
/// life and is destroyed only in the buffer's `deinit`, when no other reference exists.
///
/// Do not make the value a closure (or an optional one): a generic value keeps a closure in its most
/// general form, and a `withLock { $0 }` converts it on the way out and again on its write-back, so each
/// read wraps it in two more conversion thunks and every later call goes through all of them (a cluster
/// node's store did, two frames deeper at each commit). Keep the closure in a struct, and lock that.
@usableFromInline
package struct Locked<Value>: @unchecked Sendable {
    @usableFromInline
    let buffer: LockedBuffer<Value>

    /// Creates a lock guarding `value`.
    @inlinable
    package init(_ value: Value) {
        let created = LockedBuffer<Value>.create(minimumCapacity: LockedBuffer<Value>.mutexWords) { _ in value }
        // `create` called on `LockedBuffer` always returns a `LockedBuffer`; it is only typed as its
        // superclass.
        buffer = unsafeDowncast(created, to: LockedBuffer<Value>.self)
        buffer.withUnsafeMutablePointerToElements { LockedBuffer<Value>.initializeMutex(at: $0) }
    }

    /// Runs `body` with exclusive access to the value. `body` must not call back into this lock.
    @inlinable
    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        #if EFFECTLOOP_COUNT_LOCKS
        lockAcquisitions.add(1, ordering: .relaxed)
        #endif
        return try buffer.withUnsafeMutablePointers { value, mutex in
            LockedBuffer<Value>.lock(mutex)
            defer { LockedBuffer<Value>.unlock(mutex) }
            return try body(&value.pointee)
        }
    }
}

/// The storage of ``Locked``: the value as the header; the mutex in the elements, which are 8-byte words
/// (a `pthread_mutex_t` needs that alignment) enough to hold one. Shared only through ``Locked``.
@usableFromInline
package final class LockedBuffer<Value>: ManagedBuffer<Value, UInt64> {
    /// How many words the mutex takes.
    @usableFromInline
    static var mutexWords: Int {
        (MemoryLayout<pthread_mutex_t>.size + MemoryLayout<UInt64>.size - 1) / MemoryLayout<UInt64>.size
    }

    deinit {
        withUnsafeMutablePointerToElements { words in
            _ = pthread_mutex_destroy(UnsafeMutableRawPointer(words).assumingMemoryBound(to: pthread_mutex_t.self))
        }
    }

    @usableFromInline
    static func initializeMutex(at words: UnsafeMutablePointer<UInt64>) {
        let mutex = UnsafeMutableRawPointer(words).bindMemory(to: pthread_mutex_t.self, capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        #if canImport(Glibc)
        // Adaptive: a contended lock spins briefly before the thread sleeps in the kernel. The lock is
        // held for a few hundred nanoseconds at most, so a waiter usually gets it while spinning; sleeping
        // at once made futex waits and wake-ups most of the asynchronous round trip (Performance.md).
        var attributes = pthread_mutexattr_t()
        _ = pthread_mutexattr_init(&attributes)
        _ = pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        _ = pthread_mutex_init(mutex, &attributes)
        _ = pthread_mutexattr_destroy(&attributes)
        #else
        _ = pthread_mutex_init(mutex, nil)
        #endif
    }

    @usableFromInline
    static func lock(_ words: UnsafeMutablePointer<UInt64>) {
        pthread_mutex_lock(UnsafeMutableRawPointer(words).assumingMemoryBound(to: pthread_mutex_t.self))
    }

    @usableFromInline
    static func unlock(_ words: UnsafeMutablePointer<UInt64>) {
        pthread_mutex_unlock(UnsafeMutableRawPointer(words).assumingMemoryBound(to: pthread_mutex_t.self))
    }
}
