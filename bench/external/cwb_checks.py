"""Pieces the external check scripts share (imported from their own folder)."""
import math

import numpy as np
import torch


def logits_agreement(model, logits_file):
    """max |Δlogit| / max |logit| and argmax agreement between `model` and the logits cwb wrote for ids 1..32."""
    ids = torch.arange(1, 33).unsqueeze(0)
    with torch.no_grad():
        theirs = model(ids).logits.float().numpy()
    ours = np.fromfile(logits_file, dtype=np.float32).reshape(theirs.shape)
    return np.abs(theirs - ours).max() / np.abs(ours).max(), (theirs.argmax(-1) == ours.argmax(-1)).mean()


def perplexity(model, ids, bos, ctx, chunks):
    """Perplexity the way cwb eval (and llama.cpp's perplexity tool) measures it: chunks of ctx tokens with BOS
    first, only the second half of each chunk scored."""
    first, scored = ctx // 2, ctx - 1 - ctx // 2
    nll, n = 0.0, 0
    for c in range(chunks):
        chunk = torch.tensor(ids[c * ctx:(c + 1) * ctx]).unsqueeze(0)
        chunk[0, 0] = bos
        with torch.no_grad():
            logp = torch.log_softmax(model(chunk).logits[0].double(), -1)
        for i in range(first, first + scored):
            nll -= logp[i, chunk[0, i + 1]].item()
            n += 1
    return math.exp(nll / n)
