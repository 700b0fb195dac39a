import Foundation
import LoopSupport
import Testing

/// `loop-demo node`, `submit` and `jobs`: the job runner as a cluster, through the real binary.
@Suite("loop-demo as a cluster", .serialized)
struct ClusterCommandTests {
    @Test func theClusterCommandsRefuseWhatTheyCannotUse() async throws {
        let (_, output) = try await Demo.sh(#""$DEMO" submit build -- make; echo "exit=$?""#)
        #expect(output.contains("submit needs --postgres CONNINFO") && output.hasSuffix("exit=64"))
        let (_, missing) = try await Demo.sh(#""$DEMO" submit --postgres x build; echo "exit=$?""#)
        #expect(
            missing.contains(
                "usage: submit --postgres CONNINFO [--key KEY] NAME [--timeout S] [--retries N] -- COMMAND..."
            )
                && missing.hasSuffix("exit=64")
        )
        let (_, unreachable) = try await Demo.sh(
            #""$DEMO" jobs --postgres 'host=/nonexistent-effectloop dbname=x'; echo "exit=$?""#
        )
        #expect(unreachable.contains("/nonexistent-effectloop") && unreachable.hasSuffix("exit=73"))
    }

    // A hang guard, not a timing: every test of the process starts at once on two threads, so a
    // test needing milliseconds can wait minutes for the others (138 s seen under TSAN).
    @Test(.timeLimit(.minutes(10)))
    func jobsSubmittedToTheClusterRunOnANodeAndAreListed() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let script = """
            "$DEMO" submit --postgres '\(database)' hello -- echo hi || exit 1
            "$DEMO" submit --postgres '\(database)' doomed --retries 0 -- exit 3 || exit 1
            "$DEMO" node --postgres '\(database)' --name only > /dev/null &
            node=$!
            for i in $(seq 600); do
                out=$("$DEMO" jobs --postgres '\(database)')
                case "$out" in *"hello succeeded"*"doomed failed"*|*"doomed failed"*"hello succeeded"*) break;; esac
                sleep 0.1
            done
            kill -TERM $node; wait $node; echo "node=$?"
            "$DEMO" jobs --postgres '\(database)'
            """
        let (status, output) = try await Demo.sh(script)
        #expect(status == 0)
        #expect(output.contains("submitted hello") && output.contains("submitted doomed"))
        #expect(output.contains("node=0"))
        #expect(output.hasSuffix("doomed failed after 1 attempt: exit status 3\nhello succeeded"))
    }

    // A hang guard, not a timing: every test of the process starts at once on two threads, so a
    // test needing milliseconds can wait minutes for the others (138 s seen under TSAN).
    /// `submit --key` asks the job's entity and prints its answer; a repeat of the key prints the same
    /// answer and submits nothing again; another key for the same name is rejected by the entity.
    @Test(.timeLimit(.minutes(10)))
    func aKeyedSubmitPrintsTheAnswerAndARepeatAppliesNothing() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let script = """
            "$DEMO" node --postgres '\(database)' --name only > /dev/null &
            node=$!
            "$DEMO" submit --postgres '\(database)' --key k1 hello -- true; echo "first=$?"
            "$DEMO" submit --postgres '\(database)' --key k1 hello -- true; echo "again=$?"
            "$DEMO" submit --postgres '\(database)' --key k2 hello -- true; echo "other=$?"
            kill -TERM $node; wait $node; echo "node=$?"
            psql -X -q -A -t -d '\(database)' -c "SELECT count(*) FROM effectloop.events WHERE stream = 'job-hello'
                AND position(convert_to('\"request\"', 'UTF8') IN payload) > 0"
            """
        let (status, output) = try await Demo.sh(script)
        #expect(status == 0, "\(output)")
        #expect(output.contains("queued hello\nfirst=0\nqueued hello\nagain=0\n"), "\(output)")
        #expect(output.contains("rejected hello: a job with this name exists\nother=1"), "\(output)")
        #expect(output.contains("node=0"), "\(output)")
        // The first try and the other key were applied; the repeat was not.
        #expect(output.hasSuffix("2"), "\(output)")
    }

    // A hang guard, not a timing: every test of the process starts at once on two threads, so a
    // test needing milliseconds can wait minutes for the others (138 s seen under TSAN).
    /// Every job is an entity with its own limit: the node's `--limit` bounds the commands it runs at
    /// once. Each job marks itself running and counts the marks; no count may exceed the limit.
    @Test(.timeLimit(.minutes(10)))
    func aNodeRunsAtMostItsLimitOfCommandsAtOnce() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let scratch = Demo.scratch()
        let script = """
            mkdir -p '\(scratch)/running'
            for i in $(seq 12); do
                "$DEMO" submit --postgres '\(database)' "j$i" -- \
                    "touch \(scratch)/running/j$i; ls \(scratch)/running | wc -l >> \(scratch)/counts; sleep 0.2; rm \(scratch)/running/j$i" \
                    > /dev/null || exit 1
            done
            "$DEMO" node --postgres '\(database)' --name only --limit 2 > /dev/null &
            node=$!
            for i in $(seq 600); do
                [ "$("$DEMO" jobs --postgres '\(database)' | grep -c succeeded)" = 12 ] && break
                sleep 0.1
            done
            kill -TERM $node; wait $node; echo "node=$?"
            echo "most=$(sort -n '\(scratch)/counts' | tail -1) counted=$(wc -l < '\(scratch)/counts')"
            "$DEMO" node --postgres '\(database)' --limit 0; echo "zero=$?"
            """
        let (status, output) = try await Demo.sh(script)
        #expect(status == 0, "\(output)")
        #expect(output.contains("node=0"), "\(output)")
        #expect(output.contains("most=1 counted=12") || output.contains("most=2 counted=12"), "\(output)")
        #expect(output.contains("--limit needs a number of at least 1, not '0'") && output.hasSuffix("zero=64"))
    }

    // A hang guard, not a timing: every test of the process starts at once on two threads, so a
    // test needing milliseconds can wait minutes for the others (138 s seen under TSAN).
    /// A row inserted with SQL whose command holds a NUL: the shell would run only what comes before it,
    /// while the store recorded all of it. The job is refused and nothing runs.
    @Test(.timeLimit(.minutes(10)))
    func aCommandWithANULFromTheInboxIsRefusedAndNothingRuns() async throws {
        let database = try await TemporaryPostgres.shared().createDatabase()
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let submitted = try await Demo.sh("\"$DEMO\" submit --postgres '\(database)' hello -- true")
        #expect(submitted.status == 0, "\(submitted.output)")
        let payload =
            #"{"submit":{"_0":{"name":"nul","command":"touch \#(scratch)/A\u0000; touch \#(scratch)/B","retries":0}}}"#
        _ = try await TemporaryPostgres.psql(
            database,
            sql: "INSERT INTO effectloop.inbox (stream, payload) VALUES ('job-nul', convert_to('\(payload)', 'UTF8'))"
        )
        let script = """
            "$DEMO" node --postgres '\(database)' --name only > '\(scratch)/node' 2>&1 &
            node=$!
            for i in $(seq 600); do
                rows=$(psql -X -q -A -t -d '\(database)' -c 'SELECT count(*) FROM effectloop.inbox')
                out=$("$DEMO" jobs --postgres '\(database)')
                case "$rows $out" in "0 "*"hello succeeded"*) break;; esac
                sleep 0.1
            done
            kill -TERM $node; wait $node; echo "node=$?"
            "$DEMO" jobs --postgres '\(database)'
            """
        let (status, output) = try await Demo.sh(script)
        #expect(status == 0, "\(output)")
        #expect(output.contains("node=0"), "\(output)")
        #expect(output.contains("hello succeeded"), "\(output)")
        #expect(!output.contains("nul succeeded"), "\(output)")
        #expect(!FileManager.default.fileExists(atPath: scratch + "/A"), "the command ran")
        #expect(!FileManager.default.fileExists(atPath: scratch + "/B"), "the command ran")
        let log = String(decoding: FileManager.default.contents(atPath: scratch + "/node") ?? Data(), as: UTF8.self)
        #expect(log.contains("cannot contain a NUL character"), "\(log)")
    }
}
