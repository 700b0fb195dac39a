import Foundation
import LoopTesting
import Testing

/// `loop-demo node`, `submit` and `jobs`: the job runner as a cluster, through the real binary.
@Suite("loop-demo as a cluster", .serialized)
struct ClusterCommandTests {
    @Test func theClusterCommandsRefuseWhatTheyCannotUse() async throws {
        let (_, output) = try await Demo.sh(#""$DEMO" submit build -- make; echo "exit=$?""#)
        #expect(output.contains("submit needs --postgres CONNINFO") && output.hasSuffix("exit=64"))
        let (_, missing) = try await Demo.sh(#""$DEMO" submit --postgres x build; echo "exit=$?""#)
        #expect(
            missing.contains("usage: submit --postgres CONNINFO NAME [--timeout S] [--retries N] -- COMMAND...")
                && missing.hasSuffix("exit=64")
        )
        let (_, unreachable) = try await Demo.sh(
            #""$DEMO" jobs --postgres 'host=/nonexistent-effectloop dbname=x'; echo "exit=$?""#
        )
        #expect(unreachable.contains("/nonexistent-effectloop") && unreachable.hasSuffix("exit=73"))
    }

    @Test(.timeLimit(.minutes(2)))
    func jobsSubmittedToTheClusterRunOnANodeAndAreListed() async throws {
        let database = try TemporaryPostgres.shared().createDatabase()
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
}
