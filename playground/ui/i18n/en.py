"""English: the complete table (README "Languages" says how to add a string or a language).

Keys are "area.what"; one section per area (a file or a tab), so that work on different tabs adds
to different places. Text used with i18n() (static) has no {fields}; text for t() is a str.format
template: {name} fields, and a literal brace doubled ({{ }}). The engine's own text (errors, the KV
formula) is not here: its English is at the call (playground/messages.py), other languages have it.
"""

NAME = "English"
LOCALE = "en"
STRINGS: dict[str, str] = {
    # --- the header and toolbar (ui/app.py) ---------------------------------------------------------
    "app.title": "LLM generation playground",
    "app.header.name": "**Model:** {name}",
    "app.header.details": "{size} · **engine** {kind} · **device** {device}{dtype} · "
    "loaded in {seconds:.1f} s ({source}) · context {context:,} tokens",
    "app.header.size": " · {millions:,.1f} M parameters",
    "app.header.dtype": " · **dtype** {dtype}",
    "app.header.remote": " · **engine** {kind} at {url} (every number comes from it) · "
    "top {top:,} alternatives per position · context {context:,} tokens{untested}",
    "app.header.untested": " · ⚠️ not yet tested against a live server",
    "app.language": "Language",
    "app.presenter": "Presenter",
    "app.keys": "Keys (?)",
    "app.copy_link": "Copy link",
    "app.link": "Link to this view",
    "app.link.info": "Opens this tab with the same prompt, settings and seed: the same answer.",
    # --- the tabs' names ------------------------------------------------------------------------------
    "tab.chat": "Chat",
    "tab.step": "Step by step",
    "tab.beam": "Beam search",
    "tab.kv": "KV cache",
    "tab.hood": "Under the hood",
    "tab.compare": "Compare",
    # --- shared by every tab (ui/common.py) -----------------------------------------------------------
    "shared.out_of_memory": "Out of memory: try fewer tokens, fewer beams or a shorter prompt.",
    "shared.unexpected": "Something went wrong: {kind}: {detail}",
    "shared.range.value": "Value",
    "shared.range.clamped": "{label} {value:g} is outside its range {range}: set to {used:g}.",
    # --- Step by step (ui/step_tab.py, ui/step_render.py) ----------------------------------------------
    "step.import.refused": "**Can't import {name}:** {why}",
    "step.import.done": "Imported {name} · {status}",
    "step.becomes": "becomes {chars}",
    # --- Under the hood (ui/hood/) ----------------------------------------------------------------------
    "hood.attn.position_moved": "Query position {value} is outside this text's range 0–{last}: "
    "showing {shown}.",
    # --- shared links (ui/links.py) -------------------------------------------------------------------
    "link.bad_tab": "This link's tab={tab!r} is not a tab: use one of {tabs}.",
    "link.not_a_setting": "{key}={text!r} is not a setting of this tab (it takes {keys})",
    "link.not_a_lesson_setting": "{key}={text!r} is not a setting of this lesson (it takes {keys})",
    "link.bad_lesson": "This link's view={view!r} is not a lesson: use one of {lessons}.",
    "link.refused": "{key}={text!r} is not allowed: {why}",
    "link.must_be": "{name} must be {allowed}",
    "link.problems": "This link's {problems}.",
    "link.separator": "; ",
    "link.tab_opened": "{problem} {tab} opened with its defaults instead.",
    "link.page_opened": "{problem} The page opened with its defaults instead.",
    "link.unopened": "This link could not be opened: {why} {tab} opened with its defaults instead.",
    "link.bad_lang": "This link's lang={lang!r} is not a language of this page: use one of {languages}.",
    # --- Chat (ui/chat_tab.py: issue 33) --------------------------------------------------------------
    # --- Step by step (ui/step_tab.py: issue 33) ------------------------------------------------------
    # --- Beam search (ui/beam_tab.py: issue 33) -------------------------------------------------------
    # --- KV cache (ui/kv_tab.py, kv_text.py, kv_measured_quant.py, plots/kv.py) ---------------------
    "kv.intro": "How much memory does the KV cache take? Pick a model or paste its `config.json`; every "
    "number below is exact and shows where it came from. GiB = 2^30 bytes, GB = 10^9 bytes.",
    "kv.preset": "Model",
    "kv.preset.info": "A preset fills the config.json below; edit it or paste your own, then Calculate.",
    "kv.preset.loaded": "Loaded model",
    "kv.config": "config.json: view, edit, paste or load",
    "kv.config_path": "Local path or Hub id",
    "kv.config_path.info": "A config.json, a model directory, or (online only) a Hub id such as "
    "Qwen/Qwen2.5-7B.",
    "kv.load": "Load config",
    "kv.seq_len": "Sequence length (tokens)",
    "kv.seq_len.info": "Prompt + generated tokens: every cached layer holds one K and one V per token.",
    "kv.batch": "Batch",
    "kv.batch.info": "Sequences decoded together: each keeps its own cache, so bytes scale linearly.",
    "kv.kv_dtype": "KV dtype",
    "kv.kv_dtype.info": "Bytes per cached value; q8_0/q4_0 add a float16 scale per 32 values.",
    "kv.mode": "Mode",
    "kv.mode.info": "ideal: what an efficient engine must hold; transformers: what its DynamicCache keeps.",
    "kv.mode.ideal": "ideal",
    "kv.mode.transformers": "transformers",
    "kv.gpu": "GPU memory (GB = 10^9 B)",
    "kv.gpu.info": "Memory of one GPU as vendors print it; type any other size in GB.",
    "kv.weights_dtype": "Weights dtype",
    "kv.weights_dtype.loaded": "As loaded: {dtype} ({model} runs in it here). Weights take parameters × "
    "bytes per parameter next to the cache.",
    "kv.weights_dtype.preset": "bfloat16: how most checkpoints are published. Weights take parameters × "
    "bytes per parameter next to the cache.",
    "kv.params_b": "Parameters (billions, optional)",
    "kv.params_b.placeholder": "blank: automatic",
    "kv.params_b.info": "Blank: the loaded model's count, a preset's published count, or an estimate.",
    "kv.overhead": "Overhead reserve (% of GPU)",
    "kv.overhead.info": "Kept free for activations, CUDA context and fragmentation (vLLM uses ~10 %).",
    "kv.calculate": "Calculate",
    "kv.curves": "KV cache vs context length",
    "kv.bars": "Weights + KV cache vs GPU memory",
    "kv.layers": "Per-layer breakdown",
    "kv.field.seq_len": "Sequence length",
    "kv.field.batch": "Batch",
    "kv.field.params_b": "Parameters (billions)",
    "kv.field.prompt_length": "Prompt length",
    "kv.cant_calculate": "**Can't calculate:** {why}",
    "kv.stale": "The formula, figures and table below are the last good calculation, marked stale, "
    "until one succeeds.",
    "kv.this_config": "this config",
    "kv.params.entered": "as entered",
    "kv.params.counted": "counted on the loaded model",
    "kv.params.published": "published count of {preset}",
    "kv.params.estimated": "estimated from the config (embeddings, attention, MLP)",
    "kv.sum.total": "### KV cache: **{bytes:,} bytes** = **{gib:,.3f} GiB** (2^30 B) = **{gb:,.3f} GB** "
    "(10^9 B)",
    "kv.sum.inputs": "{tokens:,} tokens × batch {batch} · KV dtype {dtype} ({note}) · mode *{mode}* · "
    "per token and sequence: {per_token:,.0f} B",
    "kv.sum.weights": "**Weights:** {billions:,.3f} B parameters ({source}) in {dtype} = {size}",
    "kv.sum.gpu": "**On {article} {size} GB GPU** ({gib:,.1f} GiB): {verdict}. Overhead reserve "
    "{reserve} ({share:.0%} of the GPU, for activations, CUDA context, fragmentation) leaves {free} for "
    "the KV cache.",
    "kv.sum.fits": "✅ fits",
    "kv.sum.does_not_fit": "❌ does not fit",
    "kv.sum.longest": "- longest context at batch {batch}: {longest}",
    "kv.sum.largest": "- largest batch at {tokens:,} tokens: **{largest}**",
    "kv.sum.unbounded": "unbounded",
    "kv.sum.any_length": "any length (every cached layer is windowed, so the cache stops growing)",
    "kv.sum.more_than": "more than {tokens:,} tokens",
    "kv.sum.tokens": "{tokens:,} tokens",
    "kv.sum.own_limit": "**{limit:,} tokens**, the model's own limit (`max_position_embeddings`; memory "
    "alone: {memory})",
    "kv.sum.past_limit": "- ⚠️ {tokens:,} tokens is past this model's own context limit of {limit:,} "
    "(`max_position_embeddings`).",
    "kv.sum.weights_exceed": "- ⚠️ the weights and the reserve alone exceed the GPU's memory.",
    "kv.formula.title": "#### Formula",
    "kv.formula.total": "- **total = {bytes:,} bytes**",
    "kv.formula.sources": "#### Where the numbers come from",
    "kv.col.layer": "layer",
    "kv.col.kind": "kind",
    "kv.col.kv_heads": "KV heads",
    "kv.col.k_dim": "K dim",
    "kv.col.v_dim": "V dim",
    "kv.col.tokens": "tokens held",
    "kv.col.bytes": "bytes",
    "kv.col.predicted": "predicted bytes",
    "kv.col.measured": "measured bytes",
    "kv.col.equal": "equal",
    "kv.plot.context": "context length (tokens)",
    "kv.plot.kv_gib": "KV cache (GiB = 2^30 bytes)",
    "kv.plot.hover": "%{{x:,}} tokens: %{{y:.3f}} GiB",
    "kv.plot.your_length": "your length",
    "kv.plot.weights": "weights",
    "kv.plot.kv": "KV cache",
    "kv.plot.reserve": "overhead reserve",
    "kv.plot.gpu": "GPU: {gib:.1f} GiB",
    "kv.plot.gib": "GiB (2^30 bytes)",
    "kv.measure": "Measured vs predicted: build a real cache with the loaded model",
    "kv.measure.intro": "Runs **{name}** once over synthetic tokens with `use_cache=True`, sums the "
    "bytes of the cache's key and value tensors, and compares them with the *transformers*-mode "
    "prediction. The model runs in **{dtype}**, so its cache holds {dtype} keys and values and the "
    "prediction uses that dtype (not the KV dtype above).",
    "kv.measure_length": "Prompt length (tokens)",
    "kv.measure_length.info": "Tokens in the forward pass; the cache then holds this many per layer.",
    "kv.measure.run": "Build a real cache and compare",
    "kv.measure_table": "Per layer: predicted vs measured",
    "kv.equal": "✅ equal to the byte",
    "kv.differ": "❌ they differ",
    "kv.measured": "### Measured {measured:,} bytes · predicted {predicted:,} bytes: {verdict}\n\nA "
    "forward pass of {name} (loaded in {loaded}) over {tokens:,} synthetic tokens (batch 1) filled the "
    "engine's KV cache, whose keys and values are {dtype}, the model's own dtype; measured = Σ numel × "
    "element_size over them ({layers} layers). Predicted = `{call}` = {size}, in that same dtype: the KV "
    "dtype chosen above does not apply to this real cache.",
    "kv.quant.dtype": "Quantized KV dtype",
    "kv.quant.dtype.info": "transformers QuantizedCache: fp8 built in, int8 via HQQ, int4/int2 via "
    "optimum-quanto",
    "kv.quant.run": "Build a quantized cache and compare",
    "kv.quant.table": "Per layer: quantized cache, predicted vs measured",
    "kv.quant.residual": " + {tokens} in the residual window ({dtype})",
    "kv.quant.measured": "### {dtype} cache: measured {measured:,} bytes · predicted {predicted:,} "
    "bytes: {verdict}\n\n{quantized:,} tokens held quantized{residual}; the same tokens in {model_dtype} "
    "take {plain:,} bytes ({ratio:.2f}× more). Predicted = `{call}`: {label}, {note}; scales and zeros "
    "are stored in the model's dtype. Decoding appends to a residual window of {window} unquantized "
    "tokens, re-quantized into the rest when it fills.",
    "kv.server.none": "**{why}**, and {kind} does not report KV figures here.",
    "kv.server.usage_unknown": "usage not reported",
    "kv.server.used": "{tokens:,} tokens in use",
    "kv.server.title": "### {kind}'s own KV cache: {tokens:,} tokens · {used}\n\n",
    "kv.server.from": "From {source}",
    "kv.server.blocks": ": {blocks:,} blocks × {size} tokens",
    "kv.server.no_config": ". The served model's config is not available here, so there is no prediction.",
    "kv.server.reported": "; the engine reports {size} per GPU",
    "kv.server.predicted": ".\n\nPredicted by the calculator for the served config ({note}): "
    "{per_token:,} B per token, so {tokens:,} tokens take **{size}**{reported}.",
    # --- the crowd of "Continuous batching" (ui/hood/continuous_batching.py: issue 32) ---------------
    "hood.crowd.explain": "Requests arrive on their own clock, as an audience's do (Poisson; bursty: gamma, "
    "shape 0.5): chat turns of 16-48 tokens, one-token steps and a long prompt, straight to this app's "
    "running batch.",
    "hood.crowd.rate": "arrivals per second",
    "hood.crowd.requests": "requests",
    "hood.crowd.bursty": "bursty",
    "hood.crowd.run": "Crowd: send them to this app's engine",
    "hood.crowd.gantt": "their live schedule in the app's own batch",
    "hood.crowd.latency": "TTFT and TPOT of each request (dotted: the SLO)",
    "hood.crowd.running": "Running",
    "hood.crowd.done": "Done",
    "hood.crowd.bursty_note": " (bursty)",
    "hood.crowd.status": "{state}: {answered} of {count} requests answered ({arrived} arrived) at {rate:g}/s"
    "{bursty}, in **{iterations} iterations** of the app's batch, up to **{most}** requests in one forward.",
    "hood.crowd.figures": " TTFT p50 **{ttft50:.2f} s**, p95 {ttft95:.2f} s; TPOT p50 **{tpot50}**, p95 "
    "{tpot95}; **{within:.0%}** within TTFT <= {slo_ttft:g} s and TPOT <= {slo_tpot:.0f} ms.",
    "hood.crowd.failed": " **{failed} failed**: {first}",
    "hood.crowd.no_tpot": "n/a",
    "hood.crowd.arrival": "arrival (s after the crowd began)",
    # --- the model picker (ui/model_picker.py: issue 30) ---------------------------------------------
    "picker.label": "Model of this tab",
    "picker.kind.loaded": "loaded",
    "picker.kind.remote": "a server",
    "picker.kind.embedded": "embedded, not loaded ({note})",
    "picker.kind.cached": "in the local Hub cache",
    "picker.not_installed": "not installed",
    "picker.loading": "**Loading {model}** · {seconds:.0f} s",
    "picker.same": "This tab uses {model}.",
    "picker.refused": "**Not loaded: {model}.** {why} This tab keeps its model.",
    "picker.uses": "**This tab uses {model}** from now on: Chat, Step by step, Beam search, the KV measurem"
    "ent and the lessons run on it. {estimate}",
    # --- Compare (ui/compare/: issue 30) ---------------------------------------------------------------
    "compare.intro": "Two sides, each a model or the same model with other settings, on one question, one "
    "text or one prefix. Each side's answer is the one it gives alone (same model, settings and seed). A "
    "side's model: a loaded, embedded or cached one, or type a Hub id (online) or a local path.",
    "compare.view.chat": "Chat",
    "compare.view.score": "Cross-scoring",
    "compare.view.step": "Step by step",
    "compare.view.tokens": "Tokens",
    "compare.model_a": "Side A: model",
    "compare.model_b": "Side B: model",
    "compare.quantize": "Weights",
    "compare.temperature": "Temperature",
    "compare.seed": "Seed",
    "compare.seed.info": "random",
    "compare.side.seed": " · seed {seed}",
    "compare.side.describe": "{side}: {model} · temperature {temperature:g}{seed}",
    "compare.side.not_loaded": "**Not loaded:** {why}",
    "compare.side.failed": "**Stopped:** {why}",
    "compare.remote": "Connect a server as a model (llama-server, vLLM, SGLang)",
    "compare.remote.kind": "Engine",
    "compare.remote.url": "URL",
    "compare.remote.name": "Name in the lists",
    "compare.remote.name.info": "Blank: the engine and its URL",
    "compare.remote.connect": "Connect",
    "compare.remote.failed": "**Not connected:** {why}",
    "compare.remote.connected": "Connected **{name}**: {model} on {kind}. Pick it as side A or B.",
    "compare.chat.message": "Question (both sides answer it)",
    "compare.chat.send": "Send to both",
    "compare.stop": "Stop",
    "compare.chat.system": "System prompt (both sides; a model with no chat template does not read it)",
    "compare.chat.max_new_tokens": "Max new tokens",
    "compare.chat.waiting": "Waiting for the model…",
    "compare.chat.writing": "Writing…",
    "compare.stopped": "Stopped by you.",
    "compare.parting.same": "The two answers are the same, character for character.",
    "compare.parting": "**The answers part at character {at}:** A {a} · B {b}",
    "compare.score.context": "Context (the question)",
    "compare.score.context.info": "Both texts are scored after it; a Compare chat fills it in",
    "compare.score.chat": "As a chat",
    "compare.score.chat.info": "Read the context as a user message, through each model's chat template",
    "compare.score.text_a": "Text A (side A's answer)",
    "compare.score.text_b": "Text B (side B's answer)",
    "compare.score.run": "Score each text by both models",
    "compare.score.table": "The same characters under both models",
    "compare.score.col.text": "characters",
    "compare.score.col.a_tokens": "A tokens",
    "compare.score.col.a_logprob": "A log-prob",
    "compare.score.col.b_tokens": "B tokens",
    "compare.score.col.b_logprob": "B log-prob",
    "compare.score.col.difference": "A − B (nats)",
    "compare.score.title": "**Text {side}** scored by side {other}'s model ({model})",
    "compare.score.no_text": "No text to score.",
    "compare.score.unaligned": "**Not aligned:** {why}",
    "compare.score.failed": "Not scored by {model}: {why}",
    "compare.score.total": "Under **{model}**: log p = {logprob:.2f} over {tokens} tokens, {surprise:.2f} n"
    "ats of surprise per token.",
    "compare.score.total_own": "Under **{model}** (its own model): log p = {logprob:.2f} over {tokens} toke"
    "ns, {surprise:.2f} nats of surprise per token.",
    "compare.card.token": "token",
    "compare.card.probability": "probability",
    "compare.card.logprob": "log-prob",
    "compare.card.rank": "rank",
    "compare.card.surprise": "surprise",
    "compare.card.nats": "{nats:.2f} nats",
    "compare.step.prefix": "Prefix (both models read it)",
    "compare.step.chat": "As a chat",
    "compare.step.chat.info": "Wrap it in each model's chat template as a user turn",
    "compare.step.k": "Candidates",
    "compare.step.run": "Show both models' next tokens",
    "compare.step.col.rank": "rank",
    "compare.step.col.token": "token",
    "compare.step.col.id": "id",
    "compare.step.col.probability": "probability",
    "compare.step.col.logprob": "log-prob",
    "compare.step.col.sampled": "after sampling",
    "compare.step.summary": "{model} reads the prefix as {tokens} tokens; its most likely next token: **"
    "{top}** ({prob:.1%}).",
    "compare.tokens.text": "Text",
    "compare.tokens.text.info": "Cut by both tokenizers (no model runs); at most 2,000 characters",
    "compare.tokens.run": "Tokenize with both",
    "compare.tokens.summary": "**{tokens} tokens** for {chars} characters: {per:.2f} characters per token; "
    "{bytes} of them hold only some bytes of a character.",
    "compare.tokens.ratio": "**{b} needs {ratio:.2f}× the tokens of {a}** for this text ({b_tokens} against"
    " {a_tokens}).",
    # --- Under the hood (ui/hood/: issue 35) ----------------------------------------------------------
    "hood.link_opened": "Opened from a link: its inputs are set; press Run.",
    "hood.quant.quick": "Quick setting: 3 formats over 64 tokens",
    "hood.quant.ladder": "the whole ladder, recorded (while this run measures its formats)",
    "hood.quant.ladder_recorded": "● the whole ladder, recorded {date} from {model}: {what} "
    "(while this run measures its formats)",
    # --- Beam search's Stop (ui/beam_tab.py: issue 35) ------------------------------------------------
    "beam.stopped.as_it_stood": "the tree as it stood",
    "beam.stopped.best_so_far": "Best beam so far",
    "beam.stopped.best": "Best beam",
    "beam.stopped.before_began": "**Stopped** by you: the search ended before it began.",
    "beam.stopped.before_first_step": "**Stopped** by you: the search ended before its first step.",
    "beam.stopped.shown": "Shown: the previous search. {status}",
    # --- the browser's own text (static/*.js: playgroundT("js.…")) ----------------------------------
    "js.title": "LLM generation playground",
    "js.presenter.tip": "Presenter mode: larger text, each tab's main view fits the window (key p)",
    "js.svg": "Download as SVG",
    "js.keys.title": "Keyboard",
    "js.keys.label": "Keyboard shortcuts",
    "js.keys.close": "Press <kbd>?</kbd> or <kbd>Esc</kbd> to close.",
    "js.keys.pick": "Step by step: pick that candidate",
    "js.keys.next": "Step by step: next token (a greedy step)",
    "js.keys.sample": "Step by step: sample the next token",
    "js.keys.undo": "Step by step: undo",
    "js.keys.tabs": "previous / next tab",
    "js.keys.presenter": "presenter mode on / off",
    "js.keys.help": "this help",
    "js.keys.escape": "close this help, or a pinned token card",
    "js.tip.open_lens": "This step's next token after every layer: the logit lens (Under the hood)",
    "js.tip.continue_chat": "Continue this path as a chat answer with the same settings",
}
