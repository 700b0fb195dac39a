// The code of Sources/LoopPostgres/LoopPostgres.docc/LoopPostgres.md (see LoopCore.swift).

import EffectHandlers
import LoopCore
import LoopPersistence
import LoopPostgres

/// The LoopPostgres page: orders on a Postgres store.
enum PostgresPage {
    typealias OrderID = String

    struct Order: Codable, Equatable, Sendable {
        var paid = false

        enum Event: Codable, Equatable, Sendable { case paid }
        enum Effect: Equatable, Sendable {}

        static let program = DurableProgram(
            initial: Order(),
            update: Update<Order, Event, Effect> { order, _ in
                order.paid = true
                return []
            }
        )
    }

    /// Compiled, not run: it needs a server.
    static func run(router: EffectRouter<Order.Effect, Order.Event>) async throws {
        // snippet
        let store = try await PostgresEventStore(connecting: "host=/run/postgresql dbname=orders")
        let orders = DurableLoopGroup<OrderID, Order, Order.Event, Order.Effect>(
            program: Order.program,
            effects: router,
            store: store
        )
        try await orders.run()
        // end snippet
    }
}
