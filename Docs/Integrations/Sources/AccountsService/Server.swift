internal import HTTPTypes
public import Hummingbird
internal import Logging
internal import NIOCore
public import Prometheus
internal import Tracing

/// The request context of the service: Hummingbird's, with the body limit lowered to
/// ``Translation/largestBody``.
public struct AccountsContext: RequestContext {
    /// Hummingbird's per-request storage.
    public var coreContext: CoreRequestContextStorage

    /// A context for a request from `source`.
    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
    }

    /// The largest body a route reads (`collect(upTo:)` throws past it, which Hummingbird answers 413).
    public var maxUploadSize: Int { Translation.largestBody }
}

/// The service's HTTP routes.
public enum AccountsServer {
    /// The router: `POST /accounts/{id}/deposit` and `.../withdraw` (body `{"amount": N}`, optional
    /// `Idempotency-Key` header), `GET /accounts/{id}`, `GET /health` (touches no account: the HTTP
    /// floor the benchmark measures), and `GET /metrics` (Prometheus text) when `metrics` is given.
    public static func router(
        accounts: some Accounts,
        metrics: PrometheusCollectorRegistry? = nil
    ) -> Router<AccountsContext> {
        let router = Router(context: AccountsContext.self)
        // Middleware first: Hummingbird bakes it into each route as the route is added. The first added
        // is the outermost: metrics count every response, the 413s the body limit returns too.
        if metrics != nil { router.add(middleware: MetricsMiddleware()) }
        router.add(middleware: BodyLimitMiddleware())
        router.add(middleware: TraceParentMiddleware())
        router.get("/health") { _, _ in reply(Translation.Response(status: 200, ["status": .string("ok")])) }
        router.get("/accounts/{id}") { _, context in
            let id: String
            switch Translation.accountID(context.parameters.get("id") ?? "") {
            case .failure(let refusal): return reply(refusal.response)
            case .success(let account): id = account
            }
            do {
                let balance = try await accounts.balance(of: id)
                return reply(Translation.Response(status: 200, ["id": .string(id), "balance": .integer(balance)]))
            } catch {
                context.logger.error("reading an account failed", metadata: ["account": "\(id)", "error": "\(error)"])
                return reply(.error(503, "store_failed", "the account's store failed"))
            }
        }
        for (path, kind) in [("deposit", Translation.Kind.deposit), ("withdraw", .withdraw)] {
            router.post("/accounts/{id}/\(path)") { request, context in
                try await handle(kind, request: request, context: context, accounts: accounts)
            }
        }
        if let metrics {
            router.get("/metrics") { _, _ in
                Response(
                    status: .ok,
                    headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                    body: ResponseBody(byteBuffer: ByteBuffer(bytes: metrics.emitToBuffer()))
                )
            }
        }
        return router
    }

    private static func handle(
        _ kind: Translation.Kind,
        request: Request,
        context: AccountsContext,
        accounts: some Accounts
    ) async throws -> Response {
        let id: String
        let requestID: String?
        switch (
            Translation.accountID(context.parameters.get("id") ?? ""),
            Translation.requestID(AccountsServer.requestID(of: request))
        ) {
        case (.failure(let refusal), _), (_, .failure(let refusal)): return reply(refusal.response)
        case (.success(let account), .success(let key)): (id, requestID) = (account, key)
        }
        let body = try await request.body.collect(upTo: context.maxUploadSize)
        let command: Account.Command
        switch Translation.command(kind, body: Array(buffer: body)) {
        case .failure(let refusal): return reply(refusal.response)
        case .success(let decided): command = decided
        }
        do {
            return reply(Translation.response(to: try await accounts.apply(command, on: id, requestID: requestID)))
        } catch {
            let response = Translation.response(to: error)
            context.logger.log(
                level: response.status >= 500 ? .error : .info,
                "an account request got no answer",
                metadata: ["account": "\(id)", "error": "\(error)"]
            )
            return reply(response)
        }
    }

    /// The header a client sends its request id in (its canonical, lowercase name).
    static let idempotencyKey = "idempotency-key"

    /// The value of the request's `Idempotency-Key` header, if it has one.
    static func requestID(of request: Request) -> String? {
        request.headers.first { $0.name.canonicalName == idempotencyKey }?.value
    }

    static func reply(_ response: Translation.Response) -> Response {
        Response(
            status: HTTPResponse.Status(code: response.status),
            headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: response.json))
        )
    }
}

/// Refuses a body the `Content-Length` header says is over ``Translation/largestBody`` before any of
/// it is read (a chunked body over the limit is refused by `collect(upTo:)` as it is read).
struct BodyLimitMiddleware: RouterMiddleware {
    typealias Context = AccountsContext

    func handle(
        _ request: Request,
        context: AccountsContext,
        next: (Request, AccountsContext) async throws -> Response
    ) async throws -> Response {
        if let length = request.headers[.contentLength].flatMap(Int.init), length > Translation.largestBody {
            return AccountsServer.reply(
                .error(413, "body_too_large", "the body is over \(Translation.largestBody) bytes")
            )
        }
        return try await next(request, context)
    }
}

/// Takes a W3C `traceparent` header into the request's `ServiceContext` (``ServiceContext/traceParent``,
/// for the request's own code and any instrument that reads it) and into the log metadata
/// (`trace_id`). A header that does not parse is ignored: tracing never fails a request.
struct TraceParentMiddleware: RouterMiddleware {
    typealias Context = AccountsContext

    func handle(
        _ request: Request,
        context: AccountsContext,
        next: (Request, AccountsContext) async throws -> Response
    ) async throws -> Response {
        guard let header = request.headers[.traceparent], let parent = TraceParent(header) else {
            return try await next(request, context)
        }
        var context = context
        context.logger[metadataKey: "trace_id"] = "\(parent.traceID)"
        var service = ServiceContext.current ?? .topLevel
        service.traceParent = parent
        return try await ServiceContext.withValue(service) { try await next(request, context) }
    }
}
