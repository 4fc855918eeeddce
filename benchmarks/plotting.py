"""What the benchmarks share for their plots: writing a figure atomically."""
from __future__ import annotations

import io
from pathlib import Path

from gnnsys.datasets.atomic import atomic_write_bytes


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Lay out matplotlib figure `fig` and write it as a PNG to `path`
    (complete or not at all), then close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=dpi)
    atomic_write_bytes(path, png.getvalue())
    plt.close(fig)
