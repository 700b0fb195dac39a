import Foundation
import LoopDemo
import LoopPersistence
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The built `loop-demo` binary, run as a user would.
@Suite(.serialized) struct EndToEndTests {
    @Test func theDefaultScenarioRunsEveryOutcomeAndEndsWithTheSummary() async throws {
        let (status, output) = try await Demo.sh("\"$DEMO\"")
        // Two of the scenario's jobs fail on purpose: "some job failed".
        #expect(status == 1)
        for line in [
            "flaky    succeeded after 2 attempts",
            "doomed   failed after 3 attempts: exit status 3",
            "sleepy   failed after 1 attempt: timed out after 500ms",
            "long     cancelled",
            "9 succeeded, 2 failed, 1 cancelled",
            "error: --retries takes a whole number from 0 to 100, not 'many'",
            "progress: [",
        ] {
            #expect(output.contains(line), "missing: \(line)")
        }
    }

    @Test func helpDocumentsEverythingAndAnUnknownFlagIsAUsageError() async throws {
        let help = try await Demo.sh("\"$DEMO\" --help")
        #expect(help.status == 0)
        #expect(
            help.output.contains("--journal FILE") && help.output.contains("replay FILE")
                && help.output.contains("--stdin") && help.output.contains("--version")
                && help.output.contains("--store DIR") && help.output.contains("replay --store DIR")
                && help.output.contains("verify --store DIR")
        )
        for status in [
            "0   every job succeeded", "1   some job failed", "64  usage", "65  a journal", "70  an internal",
            "73  the journal file", "74  the store failed", "66  replay --store",
        ] {
            #expect(help.output.contains(status), "help lacks exit status '\(status)'")
        }
        let unknown = try await Demo.sh("\"$DEMO\" --frobnicate")
        #expect(unknown.status == 64)
        #expect(unknown.output.hasPrefix("loop-demo: unknown argument '--frobnicate'"))
    }

    @Test func malformedLinesOnStdinGetAnErrorAndNothingIsLost() async throws {
        let input = [
            "run a -- echo one", "fly to the moon", "run b --timeout nope -- true", "cancel",
            "run c -- echo two", "\u{1}\u{2}garbage\u{FF}", "run", "status",
        ].joined(separator: "\n")
        let (status, output) = try await Demo.sh("printf '%s\\n' '\(input)' | \"$DEMO\" --stdin")
        #expect(status == 0)
        #expect(output.contains("error: unknown command 'fly'"))
        #expect(output.contains("error: --timeout takes seconds from 0.01 to 86400, not 'nope'"))
        #expect(output.contains("error: usage: cancel NAME"))
        #expect(output.contains("2 succeeded, 0 failed, 0 cancelled"))
    }

    @Test func aStoreInUseIsRefusedAndTheFirstRunIsUnharmed() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let result = try await Demo.sh(
            """
            mkfifo '\(scratch)/in'
            "$DEMO" --stdin --store '\(scratch)/store' < '\(scratch)/in' > '\(scratch)/out' 2>&1 &
            pid=$!
            exec 3> '\(scratch)/in'
            echo 'run a -- true' >&3
            until grep -q 'a succeeded' '\(scratch)/out' || ! kill -0 $pid 2>/dev/null; do sleep 0.005; done
            "$DEMO" --store '\(scratch)/store'
            echo "second=$?"
            # A replay only reads: it works on the store the first holds.
            "$DEMO" replay --store '\(scratch)/store' > '\(scratch)/replay' 2>&1
            echo "replay=$?"
            exec 3>&-
            wait $pid
            echo "first=$?"
            """
        )
        #expect(result.output.contains("second=73"), "\(result.output)")
        #expect(result.output.contains("is in use by process"), "\(result.output)")
        #expect(result.output.contains("first=0"), "\(result.output)")
        #expect(result.output.contains("replay=0"), "\(result.output)")
        let during = String(decoding: FileSystem.bytes(at: "\(scratch)/replay"), as: UTF8.self)
        #expect(during.contains("a     succeeded"), "\(during)")
        let replay = try await Demo.sh("\"$DEMO\" replay --store '\(scratch)/store'")
        #expect(replay.status == 0)
        #expect(replay.output.contains("a     succeeded") && replay.output.contains("replayed "), "\(replay.output)")
    }

    /// `metrics` prints the loop's counters in the Prometheus text format, for a plain and a durable run.
    @Test func theMetricsCommandPrintsPrometheusText() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        for options in ["", "--store '\(scratch)/store'"] {
            let (status, output) = try await Demo.sh(
                "printf 'run a -- true\\nmetrics\\n' | \"$DEMO\" --stdin \(options)"
            )
            #expect(status == 0, "\(output)")
            #expect(output.contains("# TYPE effectloop_events_processed_total counter"), "\(options): \(output)")
            #expect(
                output.contains(#"effectloop_events_processed_total{event="submit",origin="source"} 1"#),
                "\(output)"
            )
            #expect(output.contains(#"effectloop_update_duration_seconds_count{event="submit"} 1"#), "\(output)")
        }
    }

    @Test func replayingADirectoryWithNoStoreIsAnErrorAndCreatesNothing() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let result = try await Demo.sh("\"$DEMO\" replay --store '\(scratch)/none'")
        #expect(result.status == 66, "\(result.output)")
        #expect(result.output.contains("no store in \(scratch)/none"))
        #expect(!FileManager.default.fileExists(atPath: "\(scratch)/none"))
    }

    @Test func aDamagedStoreIsRefusedNamingTheFileAndOffset() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let run = try await Demo.sh(
            "printf 'run a -- true\\nrun b -- true\\n' | \"$DEMO\" --stdin --store '\(scratch)/store'"
        )
        #expect(run.status == 0, "\(run.output)")
        // Damage the first record's payload; records after it make that corruption, not a torn tail.
        let log = "\(scratch)/store/segment-00000000.log"
        var bytes = FileSystem.bytes(at: log)
        bytes[20] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: log))
        for command in ["replay --store", "--stdin --store"] {
            let result = try await Demo.sh("\"$DEMO\" \(command) '\(scratch)/store' < /dev/null")
            #expect(result.status == 65, "\(command): \(result.output)")
            #expect(result.output.contains("corrupted data at \(log) at offset 0"), "\(command): \(result.output)")
        }
    }

    /// A store whose records are intact but no longer decode (written by another program, or by this
    /// one before its types changed) is a data error: exit 65, naming the stream and version, not the
    /// 74 of a store that failed.
    @Test func aStoreWhoseEventsDoNotDecodeExitsWithADataError() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let store = try FileEventStore(directory: "\(scratch)/store")
        _ = try await store.append([Array("not a job event".utf8)], to: JobRunner.stream, expecting: 0)
        await store.close()
        let result = try await Demo.sh("\"$DEMO\" --stdin --store '\(scratch)/store' < /dev/null")
        #expect(result.status == 65, "\(result.output)")
        #expect(result.output.contains("stream 'jobs': the event at version 1 does not decode"), "\(result.output)")
    }

    /// A log file deleted under a store is loss: refused, naming it, unless the operator accepts it.
    @Test func aDeletedLogFileIsRefusedUnlessTheLossIsAccepted() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let run = try await Demo.sh("printf 'run a -- true\\n' | \"$DEMO\" --stdin --store '\(scratch)/store'")
        #expect(run.status == 0, "\(run.output)")
        let log = "\(scratch)/store/segment-00000000.log"
        try FileManager.default.removeItem(atPath: log)
        for command in ["replay --store '\(scratch)/store'", "--stdin --store '\(scratch)/store' < /dev/null"] {
            let refused = try await Demo.sh("\"$DEMO\" \(command)")
            #expect(refused.status == 65, "\(command): \(refused.output)")
            #expect(refused.output.contains("acknowledged events are gone: \(log) is missing"), "\(refused.output)")
            #expect(refused.output.contains("--accept-loss"), "\(refused.output)")
        }
        let accepted = try await Demo.sh("\"$DEMO\" --stdin --store '\(scratch)/store' --accept-loss < /dev/null")
        #expect(accepted.status == 0, "\(accepted.output)")
        #expect(accepted.output.contains("opened the store accepting a loss"), "\(accepted.output)")
    }

    static let canMountTmpfs: Bool = {
        guard getuid() == 0 else { return false }
        let scratch = Demo.scratch("probe")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        defer { umount2(scratch, Int32(MNT_DETACH)) }
        return mount("tmpfs", scratch, "tmpfs", 0, "size=64k") == 0
    }()

    /// A disk that fills up during a durable run: the demo exits 74 naming the error, still prints
    /// the summary and how much the store kept, and the store replays.
    @Test(.enabled(if: canMountTmpfs, "mounting a tmpfs needs root"))
    func aFullDiskExits74WithASummaryAndTheStoreReplays() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let disk = scratch + "/disk"
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        #expect(mount("tmpfs", disk, "tmpfs", 0, "size=64k") == 0)
        defer { umount2(disk, Int32(MNT_DETACH)) }
        let jobs = (1...2_000).map { "run job-with-a-long-name-\($0) -- true" }.joined(separator: "\n")
        try Data((jobs + "\n").utf8).write(to: URL(fileURLWithPath: scratch + "/jobs"))
        // To a file: a summary of up to 2,000 jobs is longer than what the shell helper keeps of an output.
        let run = try await Demo.sh(
            "\"$DEMO\" --stdin --store '\(disk)/store' < '\(scratch)/jobs' > '\(scratch)/out' 2>&1"
        )
        let output = String(decoding: FileSystem.bytes(at: scratch + "/out"), as: UTF8.self)
        #expect(run.status == 74, "\(output.suffix(2_000))")
        #expect(output.contains("No space left on device (errno 28)"), "\(output.suffix(2_000))")
        #expect(output.contains("events kept in \(disk)/store"), "\(output.suffix(2_000))")
        #expect(output.contains("job-with-a-long-name-1 "), "the summary is printed")
        let replay = try await Demo.sh("\"$DEMO\" replay --store '\(disk)/store'")
        #expect(replay.status == 0, "\(replay.output.suffix(2_000))")
        #expect(replay.output.contains("replayed "), "\(replay.output.suffix(2_000))")
    }

    @Test func versionPrintsTheVersion() async throws {
        let (status, output) = try await Demo.sh("\"$DEMO\" --version")
        #expect(status == 0)
        #expect(output.hasPrefix("loop-demo ") && output.hasSuffix("(EffectLoop)"))
    }

    @Test func theExitStatusSaysWhetherEveryJobSucceeded() async throws {
        let good = try await Demo.sh("printf 'run a -- true\\n' | \"$DEMO\" --stdin")
        #expect(good.status == 0)
        let bad = try await Demo.sh("printf 'run a -- true\\nrun b -- false\\n' | \"$DEMO\" --stdin")
        #expect(bad.status == 1)
    }

    @Test func inputErrorsGoToStandardErrorOnly() async throws {
        let input = "printf 'fly\\nrun a -- true\\n'"
        let stdout = try await Demo.sh("\(input) | \"$DEMO\" --stdin 2>/dev/null")
        #expect(!stdout.output.contains("error:"))
        #expect(stdout.output.contains("1 succeeded"))
        let stderr = try await Demo.sh("\(input) | \"$DEMO\" --stdin 2>&1 >/dev/null")
        #expect(stderr.output == "error: unknown command 'fly'; commands: run, cancel, status, metrics, quit")
    }

    @Test func aClosedStandardInputEndsTheRun() async throws {
        let (_, output) = try await Demo.sh("timeout 60 \"$DEMO\" --stdin <&-; echo \"exit=$?\"")
        #expect(output.hasSuffix("exit=0"))
    }

    @Test func anOverLongLineIsRejectedWholeNeverRunInPart() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            { printf 'run v -- touch %s/victim' '\(scratch)'; head -c 1100000 /dev/zero | tr '\\0' x; printf '\\n'; \
              printf 'run ok -- true\\n'; } | "$DEMO" --stdin
            """
        let (status, output) = try await Demo.sh(script)
        #expect(status == 0)
        #expect(output.contains("error: line 1 is longer than 1048576 bytes and was ignored"))
        #expect(output.contains("1 succeeded, 0 failed, 0 cancelled"))
        let left = (try? FileManager.default.contentsOfDirectory(atPath: scratch)) ?? []
        #expect(left.isEmpty, "files created: \(left)")
    }

    @Test func aLineWithANULByteIsRejected() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let (_, output) = try await Demo.sh("printf 'run n -- touch %s/nulA\\0B\\n' '\(scratch)' | \"$DEMO\" --stdin")
        #expect(output.contains("error: line 1 contains a NUL byte and was ignored"))
        let left = (try? FileManager.default.contentsOfDirectory(atPath: scratch)) ?? []
        #expect(left.isEmpty, "files created: \(left)")
    }

    @Test func controlCharactersInJobNamesAreEscaped() async throws {
        let (_, output) = try await Demo.sh("printf 'run \\033[2Jx -- true\\n' | \"$DEMO\" --stdin")
        #expect(output.contains("\\x1b[2Jx"))
        #expect(!output.contains("\u{1B}[2J"))
    }

    @Test func sigtermInTheMiddleShutsDownGracefullyWithASummary() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            mkfifo '\(scratch)/in'
            "$DEMO" --stdin < '\(scratch)/in' > '\(scratch)/out' 2>&1 &
            pid=$!
            exec 3> '\(scratch)/in'
            echo 'run quick -- true' >&3
            echo 'run slow -- sleep 30' >&3
            echo 'run later -- true' >&3
            echo 'run after -- true' >&3
            until grep -q 'started slow' '\(scratch)/out' || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done
            kill -TERM $pid
            wait $pid
            echo "exit=$?" >> '\(scratch)/out'
            exec 3>&-
            cat '\(scratch)/out'
            """
        let (_, output) = try await Demo.sh(script)
        #expect(output.contains("shutting down: "))
        #expect(output.contains("slow     cancelled at shutdown") || output.contains("slow   cancelled at shutdown"))
        // The slow job was cancelled, so not every job succeeded.
        #expect(output.contains("exit=1"))
        #expect(output.contains("(deadlineExceeded)"))
    }

    /// A second signal used to kill the demo at once (the signal source restored the default action
    /// when the loop stopped), with no summary and its jobs left running.
    @Test func aSecondSignalStopsAtOnceKillsTheJobsAndStillPrintsTheSummary() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            mkfifo '\(scratch)/in'
            "$DEMO" --stdin < '\(scratch)/in' > '\(scratch)/out' 2>&1 &
            pid=$!
            exec 3> '\(scratch)/in'
            echo "run slow -- echo \\$\\$ > '\(scratch)/job'; exec sleep 30" >&3
            until [ -s '\(scratch)/job' ] || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done
            kill -TERM $pid
            until grep -q 'shutting down' '\(scratch)/out' || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done
            kill -INT $pid
            wait $pid
            echo "exit=$?" >> '\(scratch)/out'
            exec 3>&-
            \(Demo.reportWhetherGone(pidFile: "\(scratch)/job", into: "\(scratch)/out"))
            cat '\(scratch)/out'
            """
        let (_, output) = try await Demo.sh(script)
        #expect(output.contains("exit=1"))
        #expect(output.contains("job gone"))
        #expect(output.contains("0 succeeded, 0 failed, 1 cancelled"))
    }

    @Test func aHangupShutsDownGracefully() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            mkfifo '\(scratch)/in'
            "$DEMO" --stdin < '\(scratch)/in' > '\(scratch)/out' 2>&1 &
            pid=$!
            exec 3> '\(scratch)/in'
            echo 'run quick -- true' >&3
            until grep -q 'quick succeeded' '\(scratch)/out' || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done
            kill -HUP $pid
            wait $pid
            echo "exit=$?" >> '\(scratch)/out'
            exec 3>&-
            cat '\(scratch)/out'
            """
        let (_, output) = try await Demo.sh(script)
        #expect(output.contains("shutting down: 0 running"))
        #expect(output.contains("1 succeeded, 0 failed, 0 cancelled"))
        #expect(output.contains("exit=0"))
    }

    /// The shutdown report said `deadlineExceeded` in about 2 of 10 runs where nothing was cut off.
    @Test func theEndingOfAShutdownWithNothingLeftIsDrainedEveryTime() async throws {
        let lines = (1...100).map { "run j\($0) -- true" }.joined(separator: "\\n")
        for round in 1...5 {
            let (status, output) = try await Demo.sh("printf '\(lines)\\n' | \"$DEMO\" --stdin")
            #expect(status == 0, "round \(round)")
            #expect(output.contains("(drained)"), "round \(round): \(output.suffix(300))")
        }
    }

    /// A job that left its process group (`setsid`) used to defeat its timeout: the demo killed the
    /// group, the escaped process lived on, and the job stayed "running" until it exited by itself.
    /// `setsid -f` always forks, so the escapee's parent exits at once and it is no longer a
    /// descendant of the job: it is found by the job's output pipe it still holds.
    @Test(arguments: ["setsid", "setsid -f"])
    func aTimeoutKillsEveryProcessOfTheJobEvenOneThatLeftItsGroup(escape: String) async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            start=$(date +%s)
            printf '%s\\n' "run esc --timeout 1 -- \(escape) sh -c 'echo \\$\\$ > \(scratch)/pid; exec sleep 25'" \\
              | "$DEMO" --stdin > '\(scratch)/out' 2>&1
            echo "exit=$?" >> '\(scratch)/out'
            echo "took=$(( $(date +%s) - start ))" >> '\(scratch)/out'
            \(Demo.reportWhetherGone(pidFile: "\(scratch)/pid", into: "\(scratch)/out"))
            cat '\(scratch)/out'
            """
        let (_, output) = try await Demo.sh(script)
        #expect(output.contains("esc failed after 1 attempt: timed out after 1s"))
        #expect(output.contains("job gone"))
        #expect(output.contains("exit=1"))
        // The escaped `sleep 25` held the old demo for 25 s; now the timeout ends the job at 1 s.
        let took = output.split(separator: "\n").first { $0.hasPrefix("took=") }.flatMap { Int($0.dropFirst(5)) }
        #expect((took ?? 99) < 15, "took \(took ?? -1) s")
    }

    /// A job may leave a process running in the background and end; the demo kills such strays (they
    /// are re-parented to it) when it stops, so none outlives it.
    @Test func processesAJobLeftBehindDoNotOutliveTheDemo() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            start=$(date +%s)
            printf '%s\\n' "run bg -- setsid sh -c 'echo \\$\\$ > \(scratch)/pid; exec sleep 25' > /dev/null 2>&1 &" \\
              | "$DEMO" --stdin > '\(scratch)/out' 2>&1
            echo "exit=$?" >> '\(scratch)/out'
            echo "took=$(( $(date +%s) - start ))" >> '\(scratch)/out'
            for i in $(seq 100); do [ -s '\(scratch)/pid' ] && break; sleep 0.05; done
            \(Demo.reportWhetherGone(pidFile: "\(scratch)/pid", into: "\(scratch)/out"))
            cat '\(scratch)/out'
            """
        let (_, output) = try await Demo.sh(script)
        #expect(output.contains("bg succeeded"))
        #expect(output.contains("exit=0"))
        #expect(output.contains("job gone"))
        let took = output.split(separator: "\n").first { $0.hasPrefix("took=") }.flatMap { Int($0.dropFirst(5)) }
        #expect((took ?? 99) < 15, "took \(took ?? -1) s")
    }

    /// SIGKILL leaves the demo no chance to act: each job's guard is told by Linux that the demo died
    /// (`PR_SET_PDEATHSIG`) and kills the job and everything below it, even a process that left the
    /// job's group and whose parent exited (`setsid -f`).
    @Test func killMinus9OfTheDemoTakesItsJobsDownWithIt() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            mkfifo '\(scratch)/in'
            "$DEMO" --stdin < '\(scratch)/in' > '\(scratch)/out' 2>&1 &
            pid=$!
            exec 3> '\(scratch)/in'
            printf '%s\\n' "run slow -- echo \\$\\$ > \(scratch)/slow; exec sleep 30" \\
              "run esc -- setsid -f sh -c 'echo \\$\\$ > \(scratch)/esc; exec sleep 31'; sleep 30" >&3
            for i in $(seq 1000); do [ -s '\(scratch)/slow' ] && [ -s '\(scratch)/esc' ] && break; sleep 0.01; done
            kill -9 $pid
            wait $pid
            echo "killed=$?" >> '\(scratch)/out'
            \(Demo.reportWhetherGone(pidFile: "\(scratch)/slow", into: "\(scratch)/out"))
            \(Demo.reportWhetherGone(pidFile: "\(scratch)/esc", into: "\(scratch)/out"))
            exec 3>&-
            cat '\(scratch)/out'
            """
        let (_, output) = try await Demo.sh(script)
        #expect(output.contains("killed=137"), "\(output)")
        #expect(output.components(separatedBy: "job gone").count == 3, "\(output)")
    }

    /// The guard is told when the demo's thread that started it ends, so that thread is the one that
    /// waits for the job: a job outlives any idle thread of the concurrency pool.
    @Test func aLongJobIsNotKilledByItsGuardWhileTheDemoLives() async throws {
        let (status, output) = try await Demo.sh("printf 'run long -- sleep 7\\n' | \"$DEMO\" --stdin")
        #expect(status == 0, "\(output)")
        #expect(output.contains("long succeeded"), "\(output)")
    }

    /// The demo is the subreaper of its jobs, so what they leave behind becomes its child when it
    /// exits; those children are reaped, not left as zombies for the demo's whole life.
    @Test func processesJobsLeftBehindAreReapedWhenTheyExit() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            mkfifo '\(scratch)/in'
            "$DEMO" --stdin < '\(scratch)/in' > '\(scratch)/out' 2>&1 &
            pid=$!
            exec 3> '\(scratch)/in'
            echo 'run b1 -- sleep 0.2 > /dev/null 2>&1 &' >&3
            echo 'run b2 -- sleep 0.2 > /dev/null 2>&1 &' >&3
            until grep -q 'b2 succeeded' '\(scratch)/out' || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done
            while ps --ppid $pid -o stat=,comm= | grep -v '^Z' | grep -q sleep; do sleep 0.02; done
            echo 'run t -- true' >&3
            until grep -q 't succeeded' '\(scratch)/out' || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done
            echo "zombies=$(ps --ppid $pid -o stat= | grep -c '^Z')"
            exec 3>&-
            wait $pid
            """
        let (_, output) = try await Demo.sh(script)
        #expect(output.contains("zombies=0"), "\(output)")
    }

    @Test func aJournaledRunReplaysWithEveryDigestMatching() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let run = try await Demo.sh("\"$DEMO\" --journal '\(scratch)/j.jsonl'")
        #expect(run.status == 1)
        let replay = try await Demo.sh("\"$DEMO\" replay '\(scratch)/j.jsonl'")
        #expect(replay.status == 0)
        #expect(replay.output.contains("9 succeeded, 2 failed, 1 cancelled"))
        #expect(
            replay.output.range(of: #"replayed \d+ events; all [1-9]\d* digests matched"#, options: .regularExpression)
                != nil
        )
    }

    @Test func aCorruptedJournalGivesTheDocumentedErrorOrWarning() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        _ = try await Demo.sh("\"$DEMO\" --journal '\(scratch)/j.jsonl'")
        let lines = Demo.read("\(scratch)/j.jsonl").split(separator: "\n").map(String.init)
        #expect(lines.count > 20)

        // An edited event: replay names the first diverging event (the first digest at or after the
        // edit) and exits 65. Where the submit lands depends on timing, so find it.
        let editedIndex = try #require(
            lines.firstIndex { $0.contains("\"submit\"") && $0.contains("\"name\":\"count\"") }
        )
        let digestIndex = try #require(lines[editedIndex...].firstIndex { $0.contains("\"digest\"") })
        var edited = lines
        edited[editedIndex] = edited[editedIndex].replacingOccurrences(
            of: "\"name\":\"count\"",
            with: "\"name\":\"cOunt\""
        )
        try (edited.joined(separator: "\n") + "\n").write(
            toFile: "\(scratch)/edited.jsonl",
            atomically: true,
            encoding: .utf8
        )
        let diverged = try await Demo.sh("\"$DEMO\" replay '\(scratch)/edited.jsonl'")
        #expect(diverged.status == 65)
        #expect(diverged.output.contains("loop-demo: replay diverges at event \(digestIndex + 1): recorded digest"))

        // A torn last line: a warning naming the line; the rest replays.
        let torn = lines.joined(separator: "\n") + "\n" + String(lines[5].prefix(12))
        try torn.write(toFile: "\(scratch)/torn.jsonl", atomically: true, encoding: .utf8)
        let warned = try await Demo.sh("\"$DEMO\" replay '\(scratch)/torn.jsonl'")
        #expect(warned.status == 0)
        #expect(warned.output.contains("warning: line \(lines.count + 1) is incomplete (a torn write) and was ignored"))

        // A malformed line in the middle: an error naming the line, exit 65.
        var broken = lines
        broken[3] = "{not json"
        try (broken.joined(separator: "\n") + "\n").write(
            toFile: "\(scratch)/broken.jsonl",
            atomically: true,
            encoding: .utf8
        )
        let malformed = try await Demo.sh("\"$DEMO\" replay '\(scratch)/broken.jsonl'")
        #expect(malformed.status == 65)
        #expect(malformed.output.hasPrefix("loop-demo: line 4 is not a journal record"))

        let missing = try await Demo.sh("\"$DEMO\" replay '\(scratch)/nowhere.jsonl'")
        #expect(missing.status == 65)
    }

    @Test func killMinus9InTheMiddleLeavesAJournalThatReplays() async throws {
        let scratch = Demo.scratch()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let script = """
            mkfifo '\(scratch)/in'
            "$DEMO" --stdin --journal '\(scratch)/j.jsonl' < '\(scratch)/in' > '\(scratch)/out' 2>&1 &
            pid=$!
            exec 3> '\(scratch)/in'
            for n in 1 2 3 4 5 6 7 8; do echo "run job$n -- echo $n" >&3; done
            echo 'run slow -- sleep 29.5' >&3
            until grep -q 'started slow' '\(scratch)/out' || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done
            kill -9 $pid
            wait $pid
            echo "killed=$?"
            exec 3>&-
            pkill -f 'sleep 29.5' || true
            """
        let killed = try await Demo.sh(script)
        #expect(killed.output.contains("killed=137"))
        let written = Demo.read("\(scratch)/j.jsonl").split(separator: "\n").count
        let replay = try await Demo.sh("\"$DEMO\" replay '\(scratch)/j.jsonl'")
        #expect(replay.status == 0)
        #expect(written >= 10)
        #expect(replay.output.contains("replayed \(written) events"))
        #expect(replay.output.contains("slow  cancelled at shutdown"))
    }
}
