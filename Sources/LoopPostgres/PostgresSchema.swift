/// The store's tables, installed and upgraded in order, each step once, under an advisory lock so two
/// processes starting together do not both install.
package enum PostgresSchema {
    /// The steps, in order; the schema's version is how many have run.
    static func migrations(_ schema: String) -> [[String]] {
        [
            [
                """
                CREATE TABLE \(schema).events (
                    stream text NOT NULL,
                    version bigint NOT NULL CHECK (version > 0),
                    payload bytea NOT NULL,
                    recorded_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (stream, version)
                )
                """,
                """
                CREATE TABLE \(schema).snapshots (
                    stream text PRIMARY KEY,
                    version bigint NOT NULL,
                    payload bytea NOT NULL
                )
                """,
            ],
            // The cluster: the inbox any program can insert into, the shard each row belongs to (set by
            // the database, so a sender needs to know nothing of shards), a notification per insert,
            // the nodes' heartbeats, and the inbox row each event consumed (each at most once).
            [
                "ALTER TABLE \(schema).events ADD COLUMN inbox_id bigint UNIQUE",
                "INSERT INTO \(schema).effectloop_meta (key, value) VALUES ('shards', 64) ON CONFLICT DO NOTHING",
                """
                CREATE FUNCTION \(schema).shard_of(stream text, shards integer) RETURNS integer
                LANGUAGE sql IMMUTABLE STRICT
                AS $$ SELECT (((hashtextextended(stream, 0) % shards) + shards) % shards)::integer $$
                """,
                """
                CREATE TABLE \(schema).inbox (
                    id bigserial PRIMARY KEY,
                    stream text NOT NULL,
                    shard integer NOT NULL DEFAULT -1,
                    payload bytea NOT NULL,
                    sent_at timestamptz NOT NULL DEFAULT now()
                )
                """,
                "CREATE INDEX inbox_by_shard ON \(schema).inbox (shard, id)",
                // Each stream's shard, kept with its events, so a node taking a shard over finds its
                // entities (to recover them, so what they had under way resumes).
                """
                ALTER TABLE \(schema).events
                ADD COLUMN shard integer GENERATED ALWAYS AS (\(schema).shard_of(stream, 64)) STORED
                """,
                "CREATE INDEX events_by_shard ON \(schema).events (shard, stream)",
                """
                CREATE FUNCTION \(schema).inbox_route() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    NEW.shard := \(schema).shard_of(
                        NEW.stream,
                        64
                    );
                    RETURN NEW;
                END $$
                """,
                """
                CREATE TRIGGER inbox_route BEFORE INSERT ON \(schema).inbox
                FOR EACH ROW EXECUTE FUNCTION \(schema).inbox_route()
                """,
                inboxNotify(schema),
                """
                CREATE TRIGGER inbox_notify AFTER INSERT ON \(schema).inbox
                FOR EACH STATEMENT EXECUTE FUNCTION \(schema).inbox_notify()
                """,
                """
                CREATE TABLE \(schema).inbox_dead (
                    id bigint PRIMARY KEY,
                    stream text NOT NULL,
                    payload bytea NOT NULL,
                    reason text NOT NULL,
                    moved_at timestamptz NOT NULL DEFAULT now()
                )
                """,
                """
                CREATE TABLE \(schema).nodes (
                    node text PRIMARY KEY,
                    heartbeat_at timestamptz NOT NULL,
                    started_at timestamptz NOT NULL DEFAULT now()
                )
                """,
            ],
            // Leases: a node's heartbeat names the session holding its shard locks (its backend's pid
            // and start), so the others can tell a node whose session ended (it counts no more, at
            // once) and end the session of one whose heartbeat stopped (its lease expired).
            [
                "ALTER TABLE \(schema).nodes ADD COLUMN session_pid integer, ADD COLUMN session_start timestamptz"
            ],
            // Remembered work: the streams whose entities may have work under way (marked by the node
            // that sends them an event, before it does; cleared once the entity is settled and
            // released). A node taking a shard wakes these, not every stream the shard ever had. A store
            // from before knows no better than all of its streams.
            [
                "CREATE TABLE \(schema).awake (stream text PRIMARY KEY, shard integer NOT NULL)",
                "CREATE INDEX awake_by_shard ON \(schema).awake (shard)",
                "INSERT INTO \(schema).awake (stream, shard) SELECT DISTINCT stream, shard FROM \(schema).events",
            ],
            // Retention: a stream may keep several snapshots (its latest N, under `Retention.afterSnapshots`).
            [
                "ALTER TABLE \(schema).snapshots DROP CONSTRAINT snapshots_pkey",
                "ALTER TABLE \(schema).snapshots ADD PRIMARY KEY (stream, version)",
            ],
            // Requests across the cluster: an inbox row may carry a caller's key, the reply address and
            // the event's digest (all three, or none: a one-way event); `replies` holds each request's
            // answer where its caller reads it, written by the owner in the transaction that records it,
            // and the channel the caller listens on, notified then.
            [
                """
                ALTER TABLE \(schema).inbox ADD COLUMN key text, ADD COLUMN reply bigint, ADD COLUMN digest bigint,
                ADD CONSTRAINT inbox_request CHECK ((key IS NULL) = (reply IS NULL) AND (key IS NULL) = (digest IS NULL))
                """,
                "ALTER TABLE \(schema).inbox_dead ADD COLUMN key text, ADD COLUMN reply bigint",
                """
                CREATE TABLE \(schema).replies (
                    stream text NOT NULL,
                    reply bigint NOT NULL,
                    channel text NOT NULL,
                    payload bytea,
                    failure text,
                    failure_kind text,
                    asked_at timestamptz NOT NULL DEFAULT now(),
                    answered_at timestamptz,
                    -- The reply first: a batch of answers is found by its addresses (nearly unique).
                    PRIMARY KEY (reply, stream)
                ) WITH (fillfactor = 70)
                """,
                "CREATE INDEX replies_by_age ON \(schema).replies (asked_at)",
            ],
            // Stream names composed (NFC), as Swift compares strings and as the library sends them since
            // (`StreamName`): names stored in another spelling by a release before are composed, by
            // ``composeStoredNames(_:on:)`` (in Swift, with the tables the library composes by:
            // PostgreSQL's own `normalize` may know an older Unicode, and works only in UTF-8).
            [],
            // The index of the events by shard served the takeover's search for a shard's streams, which
            // reads `awake` since: no query uses it, and every event paid for one more index entry.
            ["DROP INDEX IF EXISTS \(schema).events_by_shard"],
        ]
    }

    /// The channel the inbox's trigger notifies and the nodes listen on: `<schema>_inbox`, or, for a
    /// schema whose name leaves no room for the suffix within PostgreSQL's 63 bytes, `effectloop_inbox_`
    /// and 16 hexadecimal digits of a hash of the name (the same in every process).
    package static func inboxChannel(_ schema: String) -> String {
        let plain = "\(schema)_inbox"
        guard plain.utf8.count > 63 else { return plain }
        // FNV-1a, 64 bits: stable across processes and releases, unlike `Hasher`.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in schema.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        let digits = String(hash, radix: 16)
        return "effectloop_inbox_" + String(repeating: "0", count: 16 - digits.count) + digits
    }

    /// The inbox's notification, one per inserting statement, on ``inboxChannel(_:)``.
    static func inboxNotify(_ schema: String) -> String {
        """
        CREATE OR REPLACE FUNCTION \(schema).inbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('\(inboxChannel(schema))', '');
            RETURN NULL;
        END $$
        """
    }

    /// The version from which stream names are stored composed.
    static let composedNames = 7

    /// The tables that hold stream names.
    static let tablesNamingStreams = ["events", "snapshots", "awake", "inbox", "inbox_dead", "replies"]

    /// Composes the names of streams stored in another spelling (by a release before names were
    /// composed), in every table that names streams, a statement per table. Two or more spellings of
    /// one name that each have events or snapshots are two streams that cannot be made one: refused,
    /// naming them, and nothing is changed (the caller's transaction is rolled back). Names are read as
    /// UTF-8, so this composes in a UTF-8 or `SQL_ASCII` database (the encodings a store's names are
    /// read back right from).
    static func composeStoredNames(_ schema: String, on connection: PostgresConnection) throws(PostgresError) {
        // ASCII names are composed already: only the others are read (a regular expression on
        // characters past ASCII, which in `SQL_ASCII` are bytes).
        let union = tablesNamingStreams.map { "SELECT stream FROM \(schema).\($0) WHERE stream ~ '[^\\x01-\\x7f]'" }
            .joined(separator: " UNION ")
        let found = try connection.execute(union)
        var names: [String] = []
        var composed: [String] = []
        for index in found.rows.indices {
            let name = try found.text(index, 0)
            guard !StreamName.isCanonical(name) else { continue }
            names.append(name)
            composed.append(StreamName.canonical(name))
        }
        guard !names.isEmpty else { return }
        let renames: [PostgresValue] = [.texts(names), .texts(composed)]
        // Spellings of one name (the composed one among them) of which more than one has a history.
        let clashes = try connection.execute(
            """
            WITH v (name, composed) AS (
                SELECT * FROM unnest($1::text[], $2::text[])
                UNION SELECT DISTINCT composed, composed FROM unnest($1::text[], $2::text[]) AS c (name, composed)
            ),
            kept AS (
                SELECT v.name, v.composed FROM v
                WHERE EXISTS (SELECT 1 FROM \(schema).events e WHERE e.stream = v.name)
                    OR EXISTS (SELECT 1 FROM \(schema).snapshots s WHERE s.stream = v.name)
            )
            SELECT composed, name FROM kept
            WHERE composed IN (SELECT composed FROM kept GROUP BY composed HAVING count(*) > 1)
            ORDER BY composed, name
            """,
            renames
        )
        if !clashes.rows.isEmpty {
            // Each name, and the UTF-8 of each spelling stored (in hexadecimal: they look alike).
            var described: [(name: String, spellings: [String])] = []
            for index in clashes.rows.indices {
                let (name, spelling) = (try clashes.text(index, 0), try clashes.text(index, 1))
                let hex = spelling.utf8.map { String($0, radix: 16) }.joined(separator: " ")
                if let last = described.last, last.name.utf8.elementsEqual(name.utf8) {
                    described[described.count - 1].spellings.append(hex)
                    described[described.count - 1].spellings.sort()
                } else {
                    described.append((name, [hex]))
                }
            }
            throw PostgresError(
                .statement,
                message: "schema \(schema): streams stored under several spellings of one name: "
                    + described.map { "'\($0.name)' (stored as \($0.spellings.joined(separator: " and ")))" }
                    .joined(separator: "; ")
                    + "; keep the events of one spelling of each (or rename the others), then upgrade"
            )
        }
        for table in tablesNamingStreams where table != "awake" {
            let shard = table == "inbox" ? ", shard = \(schema).shard_of(v.composed, 64)" : ""
            try connection.execute(
                """
                UPDATE \(schema).\(table) t SET stream = v.composed\(shard)
                FROM unnest($1::text[], $2::text[]) AS v (name, composed) WHERE t.stream = v.name
                """,
                renames
            )
        }
        // A mark per stream: the marks of several spellings become one.
        try connection.execute(
            """
            INSERT INTO \(schema).awake (stream, shard)
            SELECT DISTINCT v.composed, \(schema).shard_of(v.composed, 64)
            FROM \(schema).awake a JOIN unnest($1::text[], $2::text[]) AS v (name, composed) ON a.stream = v.name
            ON CONFLICT DO NOTHING
            """,
            renames
        )
        try connection.execute("DELETE FROM \(schema).awake WHERE stream = ANY($1::text[])", [.texts(names)])
    }

    /// Installs or upgrades `schema`; refuses a schema newer than this library knows, and a database
    /// encoded in neither UTF-8 nor `SQL_ASCII`.
    static func install(_ schema: String, on connection: PostgresConnection) throws(PostgresError) {
        let steps = migrations(schema)
        // Names, keys and failure reasons are stored as text: in an encoding such as LATIN1 most of
        // them cannot be, and one that cannot would fail its whole batch, every other stream's appends
        // in it too. `SQL_ASCII` keeps the bytes as they come.
        let encoding = try connection.execute(
            "SELECT current_database()::text, pg_encoding_to_char(encoding)::text FROM pg_database "
                + "WHERE datname = current_database()"
        )
        let (database, name) = (try encoding.text(0, 0), try encoding.text(0, 1))
        if name != "UTF8" && name != "SQL_ASCII" {
            throw PostgresError(
                .statement,
                message: "database '\(database)' is encoded in \(name); EffectLoop stores names as UTF-8 "
                    + "text: use a database created with ENCODING 'UTF8'"
            )
        }
        do throws(PostgresError) {
            try connection.execute("BEGIN")
            // Whatever the connection's session settings (a store's writer never scans a table whole):
            // a migration may need to.
            try connection.execute("SET LOCAL enable_seqscan = on")
            try connection.execute("SET LOCAL synchronous_commit = on")
            try connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", [.text("effectloop schema \(schema)")])
            try connection.execute("CREATE SCHEMA IF NOT EXISTS \(schema)")
            try connection.execute(
                "CREATE TABLE IF NOT EXISTS \(schema).effectloop_meta (key text PRIMARY KEY, value bigint NOT NULL)"
            )
            let rows = try connection.execute(
                "SELECT value FROM \(schema).effectloop_meta WHERE key = 'schema_version'"
            )
            let installed = rows.rows.isEmpty ? 0 : Int(try rows.int(0, 0))
            guard installed >= 0, installed <= steps.count else {
                throw PostgresError(
                    .statement,
                    message: "schema \(schema) is at version \(installed); this library knows up to \(steps.count)"
                )
            }
            for (index, step) in steps.enumerated() where index >= installed {
                for statement in step { try connection.execute(statement) }
                if index + 1 == composedNames { try composeStoredNames(schema, on: connection) }
            }
            // A schema named too long for `<schema>_inbox` was installed by earlier releases with a
            // notification PostgreSQL refuses, failing every insert into its inbox: set right, once (a
            // function is replaced only by its owner, and a store's user need not own it).
            if installed >= 2 && inboxChannel(schema) != "\(schema)_inbox" {
                let source = try connection.execute(
                    "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure($1)",
                    [.text("\(schema).inbox_notify()")]
                )
                let current = source.rows.isEmpty ? "" : try source.text(0, 0)
                if !current.contains(inboxChannel(schema)) { try connection.execute(inboxNotify(schema)) }
            }
            try connection.execute(
                """
                INSERT INTO \(schema).effectloop_meta (key, value) VALUES ('schema_version', $1)
                ON CONFLICT (key) DO UPDATE SET value = excluded.value
                """,
                [.int(Int64(steps.count))]
            )
            try connection.execute("COMMIT")
        } catch {
            if error.kind != .connection { _ = try? connection.execute("ROLLBACK") }
            throw error
        }
    }
}
