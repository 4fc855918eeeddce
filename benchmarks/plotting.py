"""What the benchmarks share for their plots: the one guard for the optional
matplotlib, and writing a figure atomically."""

from __future__ import annotations

import io
from pathlib import Path


def can_plot(path) -> bool:
    """Whether matplotlib is importable, so the figure `path` can be drawn;
    when it is not, prints one line saying `path` is left out (a benchmark's
    results never depend on its optional plotting dependency)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"{path}: not drawn, matplotlib is not installed (pip install matplotlib)")
        return False
    return True


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Lay out matplotlib figure `fig` and write it as a PNG to `path`
    (complete or not at all), then close it. Imports nothing at module
    level, so scripts that also run in the peers' environments can import it."""
    import matplotlib.pyplot as plt

    from gnnsys.atomic import atomic_write_bytes

    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=dpi)
    atomic_write_bytes(path, png.getvalue())
    plt.close(fig)
