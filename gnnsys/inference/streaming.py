"""One GNNLayer in eval mode computed from chunks of its source rows (streaming
exact inference, `gnnsys.inference.layerwise`).

A layer's aggregation over a destination's in-neighbours decomposes over any
split of the sources into chunks: SAGE's mean and GCN's normalised sum are
weighted sums (accumulated chunk by chunk, then the linear maps), and GAT's
softmax-weighted sum is merged with an online softmax per destination and
head (running max, running sum of exp, running weighted sum; Milakov &
Gimelshein 2018). `LayerStream` holds that state for a block of destinations;
the numba kernels add one chunk's edges to it. The parameters are the layer's
own (SAGEConv lin_l/lin_r, GCNConv lin/bias, GATConv lin/att_src/att_dst/bias,
negative_slope, heads concatenated or averaged), and the rest of the layer
(residual, norm, activation) is `GNNLayer.post_conv`, so the result equals
`layer(x_src, block)` on a full-neighbour block within float rounding.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F

_NO_IDS = np.empty(0, np.int64)


def bucket_edges(indptr, indices, targets, chunk_rows: int, num_chunks: int, drop_self: bool):
    """The in-edges of the destinations `targets` (int64 ids, or a `range` of
    ids, for which no array is made) grouped by the chunk of `chunk_rows`
    source rows their source lies in: (offsets [num_chunks + 1], src (int32,
    row within its chunk), dst (int32, position in targets), count (int64
    [len(targets)], edges kept per destination)). Within a chunk the edges
    are in destination order. drop_self leaves out edges u -> u."""
    if isinstance(targets, range):
        return _bucket(indptr, indices, _NO_IDS, targets.start, len(targets), chunk_rows, num_chunks, drop_self)
    return _bucket(indptr, indices, targets, 0, targets.shape[0], chunk_rows, num_chunks, drop_self)


@numba.njit(nogil=True, cache=True)
def _bucket(indptr, indices, ids, first, n, chunk_rows, num_chunks, drop_self):
    """bucket_edges of ids (or of first..first + n when ids is empty)."""
    per_chunk = np.zeros(num_chunks + 1, np.int64)
    count = np.zeros(n, np.int64)
    for j in range(n):
        v = ids[j] if ids.shape[0] else first + j
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if drop_self and u == v:
                continue
            per_chunk[u // chunk_rows + 1] += 1
            count[j] += 1
    offsets = np.cumsum(per_chunk)
    fill = offsets[:-1].copy()
    src = np.empty(offsets[-1], np.int32)
    dst = np.empty(offsets[-1], np.int32)
    for j in range(n):
        v = ids[j] if ids.shape[0] else first + j
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if drop_self and u == v:
                continue
            c = u // chunk_rows
            k = fill[c]
            src[k] = u - c * chunk_rows
            dst[k] = j
            fill[c] = k + 1
    return offsets, src, dst, count


@numba.njit(nogil=True, cache=True)
def _runs(dst):
    """Start of every run of equal values in `dst`, and len(dst) last."""
    starts = np.empty(dst.shape[0] + 1, np.int64)
    r = 0
    for e in range(dst.shape[0]):
        if e == 0 or dst[e] != dst[e - 1]:
            starts[r] = e
            r += 1
    starts[r] = dst.shape[0]
    return starts[: r + 1]


@numba.njit(parallel=True, nogil=True, cache=True)
def scatter_weighted(x, src, dst, dst_scale, src_scale, acc):
    """acc[dst[e]] += dst_scale[dst[e]] * src_scale[src[e]] * x[src[e]] for
    every edge e (edges in destination order; destinations in parallel)."""
    starts = _runs(dst)
    width = x.shape[1]
    for r in numba.prange(starts.shape[0] - 1):
        d = dst[starts[r]]
        for e in range(starts[r], starts[r + 1]):
            u = src[e]
            w = dst_scale[d] * src_scale[u]
            for k in range(width):
                acc[d, k] += w * x[u, k]


@numba.njit(parallel=True, nogil=True, cache=True)
def softmax_merge(x, alpha_src, src, dst, alpha_dst, slope, run_max, run_sum, acc):
    """Merge edges into an online softmax per destination and head: the
    logit of edge u -> d in head h is leaky_relu(alpha_src[u, h] +
    alpha_dst[d, h], slope); run_max/run_sum/acc hold the running max, the
    sum of exp(logit - max) and the sum of exp(logit - max) * x[u, h]
    (x: [rows, heads * channels])."""
    starts = _runs(dst)
    heads = alpha_src.shape[1]
    channels = x.shape[1] // heads
    for r in numba.prange(starts.shape[0] - 1):
        d = dst[starts[r]]
        for e in range(starts[r], starts[r + 1]):
            u = src[e]
            for h in range(heads):
                z = alpha_src[u, h] + alpha_dst[d, h]
                if z < 0:
                    z *= slope
                base = h * channels
                if z > run_max[d, h]:
                    c = np.exp(run_max[d, h] - z)
                    run_sum[d, h] = run_sum[d, h] * c + 1.0
                    for k in range(channels):
                        acc[d, base + k] = acc[d, base + k] * c + x[u, base + k]
                    run_max[d, h] = z
                else:
                    p = np.exp(z - run_max[d, h])
                    run_sum[d, h] += p
                    for k in range(channels):
                        acc[d, base + k] += p * x[u, base + k]


def _index(targets):
    """Block targets (an int64 array or a range) as an index into a tensor."""
    return slice(targets.start, targets.stop) if isinstance(targets, range) else torch.from_numpy(targets)


def _inverse_counts(count: np.ndarray) -> torch.Tensor:
    """1 / max(count, 1) as float32, with no temporary of count's size (blocks hold millions)."""
    out = np.empty(count.shape[0], np.float32)
    np.maximum(count, 1, out=out, casting="unsafe")
    return torch.from_numpy(np.reciprocal(out, out=out))


class LayerStream:
    """The state of one GNNLayer (in eval mode) for a block of destinations,
    fed chunk by chunk.

    `begin(targets, count, x_dst)` starts a block (count: kept in-edges per
    destination from `bucket_edges` with `drop_self`; x_dst: the block's own
    input rows, needed up front only when `dst_first`, GAT's attention);
    `add(x, lo, src, dst)` adds the edges of the chunk of source rows starting
    at row `lo` (x float32 on the CPU); `finish(xd, a, b)` gives the layer's
    output rows a:b of the block, xd holding `dst_rows` of those
    destinations' input rows (dst_width columns). degree: the whole graph's GCN
    degrees (`gcn_degree`), for a GCN layer. Dense maps run on `device`."""

    def __init__(self, layer, degree: torch.Tensor | None = None, device="cpu"):
        self.layer, self.kind, self.conv = layer, layer.kind, layer.conv
        self.device = torch.device(device)
        if self.kind == "gcn" and degree is None:
            raise ValueError("a gcn layer needs the whole graph's degrees (gcn_degree)")
        self.degree = degree
        self.drop_self = self.kind in ("gcn", "gat")  # GCN and GAT put their own self-loop in place of one
        self.dst_first = self.kind == "gat"
        if self.kind == "gat":
            self.heads, self.channels = self.conv.heads, self.conv.out_channels
            self.width = self.heads * self.channels
            self.slope = float(self.conv.negative_slope)
        else:
            self.width = layer.in_dim
        # SAGE narrowing its input: mean(x_u) W = mean(x_u W), so accumulate the
        # projected rows, and keep lin_r(x_dst) rather than x_dst when no residual needs it
        self.project = self.kind == "sage" and layer.out_dim < layer.in_dim
        if self.project:
            self.width = layer.out_dim
        self.dst_width = layer.out_dim if self.project and layer.residual is None else layer.in_dim
        self.projected = False

    def projection_width(self) -> int:
        """Columns of `project_rows`'s rows, from which the layer computes exactly
        what it computes from its input rows (linear maps commute with the
        aggregation); 0 when they would be no narrower than the input, or a
        residual needs the input rows themselves."""
        if self.layer.residual is not None:
            return 0
        width = sum(self.projection_parts())
        return width if width < self.layer.in_dim else 0

    def projection_parts(self) -> tuple:
        """The columns of `project_rows`'s rows as the parts kept apart: SAGE's
        neighbours' part (x W_l, what every pass reads) and its destinations'
        part (lin_r(x), read for a block's own rows only); one part for GCN and GAT."""
        out = self.layer.out_dim
        if self.kind == "sage":
            return (out, out)
        return (out,) if self.kind == "gcn" else (self.width + 2 * self.heads,)

    def project_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Input rows `x` as the layer's projected rows (projection_width
        columns): SAGE [x W_l, lin_r(x)], GCN x W, GAT [lin(x), alpha_src,
        alpha_dst]."""
        if self.kind == "sage":  # both maps in one product: [W_l; W_r] (lin_r has no bias)
            both = torch.cat([self.conv.lin_l.weight, self.conv.lin_r.weight])
            return self._dense(lambda t: F.linear(t, both.to(t.device)), x)
        if self.kind == "gcn":
            return self._dense(self.conv.lin, x)
        xp, alpha = self._project(x)
        out = torch.empty(x.shape[0], self.width + 2 * self.heads)
        out[:, : self.width], out[:, self.width : self.width + self.heads] = xp, alpha
        out[:, self.width + self.heads :] = self._alpha_dst(xp)
        return out

    def use_projection(self):
        """From now on the rows given to `dst_rows`, `begin` and `add` are `project_rows`'s."""
        if self.kind == "gat":  # each destination keeps its whole projected row
            self.dst_width = self.projection_width()
        else:  # SAGE accumulates x W_l and keeps lin_r(x); GCN both from x W
            self.width = self.dst_width = self.layer.out_dim
        self.projected = True

    def dst_bytes(self, rows_held: bool = True) -> int:
        """Host bytes of state per destination: the accumulator, GAT's softmax
        state, and its kept rows unless `rows_held` is False (read again for `finish`)."""
        extra = 3 * self.heads if self.kind == "gat" else 2  # gat: max, sum, alpha_dst; else the weights
        return 4 * (self.dst_width * rows_held + self.width + extra)

    def dst_rows(self, x: torch.Tensor) -> torch.Tensor:
        """What `finish` needs of destinations' input rows `x` (the
        destinations' part of the projected rows, once projected)."""
        if self.projected:
            return x
        return x if self.dst_width == self.layer.in_dim else self._dense(self.conv.lin_r, x)

    def chunk_row_bytes(self) -> int:
        """Host bytes per source row of a chunk beyond its float32 rows (GAT's projection and attention,
        SAGE's projected rows, the sources' weights)."""
        if self.kind == "gat":
            return 4 * (self.width + self.heads)
        return 4 * (self.width + 1) if self.project and not self.projected else 4

    def _neighbour_map(self, x: torch.Tensor) -> torch.Tensor:
        """SAGE: x W_l (lin_l without its bias, which `finish` adds once)."""
        return F.linear(x, self.conv.lin_l.weight)

    def _alpha_dst(self, xp: torch.Tensor) -> torch.Tensor:
        return (xp.view(-1, self.heads, self.channels) * self.conv.att_dst.detach().cpu()).sum(-1)

    def _split(self, x: torch.Tensor):
        """GAT's projected rows as (lin(x), alpha_src, alpha_dst), each contiguous."""
        hc, h = self.width, self.heads
        return x[:, :hc].contiguous(), x[:, hc : hc + h].contiguous(), x[:, hc + h :].contiguous()

    def _dense(self, fn, x: torch.Tensor) -> torch.Tensor:
        return fn(x.to(self.device)).float().cpu()

    def _project(self, x: torch.Tensor):
        """GAT: (lin(x) [rows, heads * channels], its alpha_src [rows, heads])."""
        c = self.conv
        xp = self._dense(c.lin, x)
        alpha = (xp.view(-1, self.heads, self.channels) * c.att_src.detach().cpu()).sum(-1)
        return xp.contiguous(), alpha.contiguous()

    def begin(self, targets, count: np.ndarray, x_dst: torch.Tensor | None = None):
        """Start a block of destinations `targets` (whole-graph ids: an int64 array or a range)."""
        n = len(targets)
        if self.kind == "gat":
            if self.projected:
                xp, alpha_self, self.alpha_dst = self._split(x_dst)
            else:
                xp, alpha_self = self._project(x_dst)
                self.alpha_dst = self._alpha_dst(xp)
            self.run_max = F.leaky_relu(alpha_self + self.alpha_dst, self.slope).contiguous()  # the self-loop
            self.run_sum = torch.ones(n, self.heads)
            self.acc = xp
            return
        self.acc = torch.zeros(n, self.width)
        self.dst_scale = _inverse_counts(count)  # SAGE's mean
        # GCN: gcn_adj_t's weights, scale_v * d_v^-1/2 * d_u^-1/2 with scale_v = (d_v - 1) / kept in-edges
        if self.kind == "gcn":
            d = self.degree[_index(targets)].float()
            self.dst_scale.mul_(d - 1).mul_(d.rsqrt())
            self.self_weight = 1.0 / d
            self.src_norm = self.degree.rsqrt()

    def end(self):
        """Let go of the block's state (its accumulator, weights and GAT's softmax state) once it is finished."""
        self.acc = self.dst_scale = self.self_weight = None
        self.run_max = self.run_sum = self.alpha_dst = None

    def add(self, x: torch.Tensor, lo: int, src: np.ndarray, dst: np.ndarray):
        """Add the edges src -> dst (src: rows of x, dst: block positions) of the chunk x = rows lo.. of the input."""
        if src.shape[0] == 0:
            return
        if self.kind == "gat":
            xp, alpha = self._split(x)[:2] if self.projected else self._project(x)
            softmax_merge(
                xp.numpy(),
                alpha.numpy(),
                src,
                dst,
                self.alpha_dst.numpy(),
                self.slope,
                self.run_max.numpy(),
                self.run_sum.numpy(),
                self.acc.numpy(),
            )
            return
        if self.project and not self.projected:
            x = self._dense(self._neighbour_map, x)
        else:
            x = x.contiguous()
        scale = self.src_norm[lo : lo + x.shape[0]] if self.kind == "gcn" else torch.ones(x.shape[0])
        scatter_weighted(
            x.numpy(), src, dst, self.dst_scale.numpy(), scale.float().contiguous().numpy(), self.acc.numpy()
        )

    @torch.no_grad()
    def finish(self, xd: torch.Tensor, a: int, b: int) -> torch.Tensor:
        """The layer's output (float32, CPU) for block positions a:b, whose `dst_rows` are `xd`."""
        c, xd = self.conv, xd.to(self.device)
        acc = self.acc[a:b].to(self.device)
        if self.kind == "sage" and self.project:
            h = acc + c.lin_l.bias + (xd if self.dst_width != self.layer.in_dim else c.lin_r(xd))
        elif self.kind == "sage":
            h = c.lin_l(acc) + c.lin_r(xd)
        elif self.kind == "gcn" and self.projected:  # acc and xd are already x W
            h = acc + xd * self.self_weight[a:b, None].to(self.device) + c.bias
        elif self.kind == "gcn":
            h = c.lin(acc + xd * self.self_weight[a:b, None].to(self.device)) + c.bias
        else:
            h = acc.view(-1, self.heads, self.channels) / self.run_sum[a:b, :, None].to(self.device)
            h = h.flatten(1) if c.concat else h.mean(dim=1)
            h = h + c.bias
        return self.layer.post_conv(h, xd).float().cpu()
