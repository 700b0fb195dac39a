import LoopDemo
import LoopRuntime
import Testing

@Suite struct ConsoleTests {
    func console(terminal: Bool) -> (Console, Locked<String>) {
        let written = Locked("")
        return (Console(isTerminal: terminal) { text in written.withLock { $0 += text } }, written)
    }

    @Test func onATerminalProgressIsOneLineRedrawnBelowTheReports() {
        let (console, written) = console(terminal: true)
        console.progress(running: 2, queued: 1, done: 3, total: 6)
        console.line("a succeeded")
        console.clearProgress()
        #expect(
            written.withLock { $0 }
                == "\r\u{1B}[K[3/6 done, 2 running, 1 queued]"
                + "\r\u{1B}[Ka succeeded\n[3/6 done, 2 running, 1 queued]"
                + "\r\u{1B}[K"
        )
    }

    @Test func elsewhereEverythingIsPlainLines() {
        let (console, written) = console(terminal: false)
        console.progress(running: 2, queued: 1, done: 3, total: 6)
        console.line("a succeeded")
        console.clearProgress()
        #expect(written.withLock { $0 } == "progress: [3/6 done, 2 running, 1 queued]\na succeeded\n")
    }
}
