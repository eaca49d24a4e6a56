"""Real training code nobody here wrote, guarded the way docs/guards.md says: a torchvision ResNet-18 on real
photos (skimage.data) with a GradScaler, and BERT from a small config with HF-style steps. A clean loop must
trip nothing; the planted problems must be named. A few seconds on CPU."""
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from gapcheck import guards


class Photos(Dataset):
    """Four real photos, resized to 64x64 and ImageNet-normalized, labelled by which photo they are."""

    def __init__(self) -> None:
        skdata = pytest.importorskip("skimage.data")
        self.photos = [skdata.astronaut(), skdata.coffee(), skdata.chelsea(), skdata.rocket()]

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int):
        img = torch.from_numpy(self.photos[index % 4]).permute(2, 0, 1).float() / 255
        img = nn.functional.interpolate(img[None], size=(64, 64), mode="bilinear", antialias=True)[0]
        mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
        return (img - mean[:, None, None]) / std[:, None, None], index % 4


@pytest.fixture
def resnet():
    from sample_models.zoo import torchvision_models

    try:
        with torchvision_models() as models:
            return models.resnet18(weights=None, num_classes=4).train()
    except ImportError as exc:
        pytest.skip(f"torchvision model definitions not installed (scripts/setup_zoo.sh): {exc}")


def test_resnet18_on_real_photos_clean_loop_trips_nothing_and_train_mode_validation_is_named(resnet):
    guards.seed_everything(0)
    optimizer = torch.optim.SGD(resnet.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu")
    monitor = guards.ScalerStepMonitor(scaler, optimizer)
    scheduler = guards.SteppedOnly(torch.optim.lr_scheduler.StepLR(optimizer, 2), monitor)
    guards.input_contract(resnet, dtype=torch.float32, range=(-3, 3), layout="NCHW")
    loader = DataLoader(Photos(), batch_size=4, shuffle=True, **guards.deterministic_loader_kwargs(0))
    with guards.GradientHealth(resnet, zero_fraction=0.8, nonfinite=False) as health:
        for x, y in loader:
            optimizer.zero_grad()
            scaler.scale(nn.functional.cross_entropy(resnet(x), y)).backward()
            scaler.step(optimizer)
            scaler.update()
            monitor.observe()
            scheduler.step()
        with guards.EvalGuard(resnet) as evaluation:
            for x, _ in loader:
                resnet(x)
    assert health.last.ok and health.last.checked == 62 and not health.findings
    assert monitor.last.optimizer_steps == 4 and not monitor.findings and scheduler.stepped == 4
    assert evaluation.last.ok and evaluation.last.watched_buffers == 60
    polluted = r"20 layer\(s\) of ResNet: bn1, layer1.0.bn1"
    with pytest.raises(guards.EvalModeError, match=polluted), guards.EvalGuard(resnet):
        resnet.train()
        resnet(next(iter(loader))[0])


def test_bert_hf_style_steps_clean_and_a_detached_encoder_is_named():
    pytest.importorskip("transformers")
    from sample_models.zoo import bert_classifier

    model = bert_classifier().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, 1000, (4, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[:, 12:] = 0
    labels = torch.tensor([0, 1, 2, 0])
    with guards.GradientHealth(model, require_all=True) as health:
        for _ in range(2):
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    assert health.last.ok and not health.findings
    # planted: the classifier head trained on detached encoder features, the classic "frozen by accident"
    with guards.GradientHealth(model, require_all=True):
        pooled = model.bert(input_ids=ids, attention_mask=mask).pooler_output.detach()
        with pytest.raises(guards.GradientError, match=r"received no gradient .*bert\.embeddings"):
            nn.functional.cross_entropy(model.classifier(model.dropout(pooled)), labels).backward()
