import LoopPersistence
import LoopTesting
import Testing

import LoopPostgres
import LoopRuntime

@Suite("PostgresEventStore", .serialized)
struct PostgresEventStoreTests {
    @Test func passesTheConformanceSuite() async throws {
        let database = try TestServer.freshDatabase()
        let counter = Locked(0)
        let stores = Locked<[PostgresEventStore]>([])
        let failures = await EventStoreConformance(scale: 100_000) {
            let number = counter.withLock { count in
                count += 1
                return count
            }
            let store = try await PostgresEventStore(connecting: database, schema: "check_\(number)")
            stores.withLock { $0.append(store) }
            return store
        }
        .run()
        #expect(failures.isEmpty, "\(failures)")
        for store in stores.withLock({ $0 }) { await store.close() }
    }
}
