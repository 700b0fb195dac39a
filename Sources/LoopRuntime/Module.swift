internal import EffectHandlers
internal import EventSources
// LoopRuntime: its public API arrives with the runtime (issue 3). The dependency edge of the
// architecture is declared here so the module graph is in place from the start.
internal import LoopCore
