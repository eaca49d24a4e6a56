"""`gapcheck export-diff` (being written)."""
import typer


def command(checkpoint: str = typer.Option(..., "--checkpoint")) -> None:
    """Compare a checkpoint's torch outputs with its ONNX export, layer by layer."""
    raise NotImplementedError("export-diff is being written")
