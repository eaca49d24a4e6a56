"""gapcheck: find where a PyTorch model's behaviour breaks between training, validation and inference."""
__version__ = "0.1.0"
