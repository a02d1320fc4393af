"""What every layer of capscope uses and none owns: the one error base
(`errors`), the limits on user input (`limits`), the JSONL reader (`jsonl`),
paths made from user text (`paths`), file checksums (`checksums`), the LRU
cache (`lru`), paired statistics (`stats`) and the one-thread rule for small
tensor work (`threads`). It imports nothing of capscope's, so anyone may
import it."""
