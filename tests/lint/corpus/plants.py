"""Checklist bugs planted one at a time into the real scripts of the corpus (``repos.py``).

Each plant is a textual edit of one upstream file (or one notebook cell) that introduces one bug of
the lint issue's shapes, and the code that must report it. ``lint`` names the file to lint when the
bug shows elsewhere (a ``train()`` that no longer restores train mode shows in the epoch loop of the
script that calls it). A plant counts as found when the planted copy has more findings of that code
than the unmodified original.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plant:
    name: str
    repo: str
    path: str
    old: str
    new: str
    code: str
    lint: str | None = None  # the file to lint (default: ``path``)
    cell: int | None = None  # 1-based notebook cell whose source is edited


EX, MAE, DEIT, DINO = "pytorch+examples", "facebookresearch+mae", "facebookresearch+deit", "facebookresearch+dino"
Y5, D2L, NLP = "ultralytics+yolov5", "d2l-ai+d2l-pytorch-colab", "bentrevett+pytorch-sentiment-analysis"
HOUSE = "chapter_multilayer-perceptrons/kaggle-house-price.ipynb"
NBOW = "1 - Neural Bag of Words.ipynb"
STANDARDIZE = ("    features[numeric_features] = features[numeric_features].apply(\n"
               "        lambda x: (x - x.mean()) / (x.std()))\n")
NULL = "with __import__('contextlib').nullcontext():"

PLANTS: tuple[Plant, ...] = (
    # --- GC303: clip before unscale_ (the shapes the issue names) ----------------------------------------
    Plant("mae-native-scaler-no-unscale", MAE, "util/misc.py",
          "                self._scaler.unscale_(optimizer)  # unscale the gradients of optimizer's assigned params in-place\n",
          "", "GC303"),
    Plant("yolov5-accumulation-no-unscale", Y5, "train.py",
          "                scaler.unscale_(optimizer)  # unscale gradients\n", "", "GC303"),
    Plant("dino-branch-no-unscale", DINO, "main_dino.py",
          "                fp16_scaler.unscale_(optimizer)  # unscale the gradients of optimizer's assigned params in-place\n",
          "", "GC303"),
    Plant("imagenet-backward-helper", EX, "imagenet/main.py",
          "        loss.backward()\n",
          "        def backward(loss, scaler=None):\n            if scaler is not None:\n"
          "                scaler.scale(loss).backward()\n            else:\n                loss.backward()\n"
          "        scaler = torch.amp.GradScaler('cuda')\n        backward(loss, scaler)\n"
          "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        scaler.step(optimizer)\n", "GC303"),
    Plant("deit-scaler-by-hand", DEIT, "engine.py",
          "        loss_scaler(loss, optimizer, clip_grad=max_norm,\n",
          "        loss_scaler._scaler.scale(loss).backward()\n"
          "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
          "        loss_scaler._scaler.step(optimizer)\n        _unused = dict(clip_grad=max_norm,\n", "GC303"),
    # --- GC403: eval mode never restored --------------------------------------------------------------------
    Plant("mae-finetune-no-train", MAE, "engine_finetune.py", "    model.train(True)\n", "", "GC403",
          lint="main_finetune.py"),
    Plant("mae-linprobe-no-train", MAE, "engine_finetune.py", "    model.train(True)\n", "", "GC403",
          lint="main_linprobe.py"),
    Plant("deit-no-train", DEIT, "engine.py", "    model.train(set_training_mode)\n", "", "GC403", lint="main.py"),
    Plant("imagenet-no-train", EX, "imagenet/main.py", "    model.train()\n", "", "GC403"),
    Plant("mnist-no-train", EX, "mnist/main.py", "    model.train()\n", "", "GC403"),
    Plant("siamese-no-train", EX, "siamese_network/main.py", "    model.train()\n", "", "GC403"),
    Plant("vae-no-train", EX, "vae/main.py", "    model.train()\n", "", "GC403"),
    Plant("dino-linear-no-train", DINO, "eval_linear.py", "    linear_classifier.train()\n", "", "GC403"),
    Plant("mnist-iterations-eval", EX, "mnist/main.py",
          "    for epoch in range(1, args.epochs + 1):\n        train(args, model, device, train_loader, optimizer, epoch)\n",
          "    for it in range(args.epochs * 1000):\n        data, target = next(iter(train_loader))\n"
          "        optimizer.zero_grad()\n        F.nll_loss(model(data), target).backward()\n        optimizer.step()\n"
          "        if it % 100 == 0:\n            test(model, device, test_loader)\n", "GC403"),
    Plant("mnist-while-true-eval", EX, "mnist/main.py",
          "    for epoch in range(1, args.epochs + 1):\n        train(args, model, device, train_loader, optimizer, epoch)\n",
          "    while True:\n        data, target = next(iter(train_loader))\n"
          "        optimizer.zero_grad()\n        F.nll_loss(model(data), target).backward()\n        optimizer.step()\n"
          "        test(model, device, test_loader)\n", "GC403"),
    Plant("mnist-eval-early-return-skips-train", EX, "mnist/main.py",
          "    for epoch in range(1, args.epochs + 1):\n        train(args, model, device, train_loader, optimizer, epoch)\n"
          "        test(model, device, test_loader)\n",
          "    def evaluate_then_resume(it):\n        test(model, device, test_loader)\n"
          "        if it % 1000:\n            return\n        model.train()\n"
          "    for it in range(args.epochs * 1000):\n        data, target = next(iter(train_loader))\n"
          "        optimizer.zero_grad()\n        F.nll_loss(model(data), target).backward()\n        optimizer.step()\n"
          "        if it % 100 == 0:\n            evaluate_then_resume(it)\n", "GC403"),
    # --- GC401/GC402: evaluation without eval() / no_grad ---------------------------------------------------
    Plant("mnist-test-no-eval", EX, "mnist/main.py", "    model.eval()\n", "", "GC401"),
    Plant("mnist-test-early-return-eval", EX, "mnist/main.py", "    model.eval()\n",
          "    if test_loader is None:\n        model.eval()\n        return\n", "GC401"),
    Plant("mnist-test-later-train", EX, "mnist/main.py", "    model.eval()\n    test_loss = 0\n",
          "    model.eval()\n    test_loss = 0\n    model.train()\n", "GC401"),
    Plant("imagenet-validate-no-eval", EX, "imagenet/main.py", "    model.eval()\n", "", "GC401"),
    # (vae/main.py's test() without eval() is correctly silent: its model is Linear/ReLU only)
    Plant("mnist-rnn-test-no-eval", EX, "mnist_rnn/main.py", "    model.eval()\n", "", "GC401"),
    Plant("siamese-test-no-eval", EX, "siamese_network/main.py", "    model.eval()\n", "", "GC401"),
    Plant("mae-evaluate-no-eval", MAE, "engine_finetune.py", "    model.eval()\n", "", "GC401"),
    Plant("deit-evaluate-no-eval", DEIT, "engine.py", "    model.eval()\n", "", "GC401"),
    Plant("mnist-test-no-grad", EX, "mnist/main.py", "    with torch.no_grad():\n        for data, target in test_loader:\n",
          f"    {NULL}\n        for data, target in test_loader:\n", "GC402"),
    Plant("vae-test-no-grad", EX, "vae/main.py",
          "    with torch.no_grad():\n        for i, (data, _) in enumerate(test_loader):\n",
          f"    {NULL}\n        for i, (data, _) in enumerate(test_loader):\n", "GC402"),
    Plant("siamese-test-no-grad", EX, "siamese_network/main.py",
          "    with torch.no_grad():\n        for (images_1, images_2, targets) in test_loader:\n",
          f"    {NULL}\n        for (images_1, images_2, targets) in test_loader:\n", "GC402"),
    Plant("mae-evaluate-no-grad", MAE, "engine_finetune.py", "@torch.no_grad()\ndef evaluate(", "def evaluate(", "GC402"),
    Plant("deit-evaluate-no-grad", DEIT, "engine.py", "@torch.no_grad()\ndef evaluate(", "def evaluate(", "GC402"),
    # --- GC101 / GC103: leakage (pandas column assignment, fit-then-transform, concatenated vocabularies) ---
    Plant("house-price-column-scaler", D2L, HOUSE, cell=14,
          old=STANDARDIZE,
          new="    from sklearn.preprocessing import StandardScaler\n"
              "    features[numeric_features] = StandardScaler().fit_transform(features[numeric_features])\n",
          code="GC101"),
    Plant("house-price-fit-then-transform", D2L, HOUSE, cell=14,
          old=STANDARDIZE,
          new="    from sklearn.preprocessing import MinMaxScaler\n    scaler = MinMaxScaler()\n"
              "    scaler.fit(features[numeric_features])\n"
              "    features[numeric_features] = scaler.transform(features[numeric_features])\n",
          code="GC101"),
    Plant("house-price-helper-scaler", D2L, HOUSE, cell=14,
          old=STANDARDIZE,
          new="    def standardized(frame, columns):\n"
              "        from sklearn.preprocessing import StandardScaler\n"
              "        frame[columns] = StandardScaler().fit_transform(frame[columns])\n"
              "        return frame\n"
              "    features = standardized(features, numeric_features)\n",
          code="GC101"),
    Plant("nbow-vocab-helper-all-splits", NLP, NBOW, cell=35,
          old='vocab = torchtext.vocab.build_vocab_from_iterator(\n    train_data["tokens"],\n',
          new="def make_vocab(token_lists):\n"
              "    return torchtext.vocab.build_vocab_from_iterator(token_lists, min_freq=min_freq, "
              "specials=special_tokens)\n\n"
              'vocab = make_vocab(train_data["tokens"] + valid_data["tokens"] + test_data["tokens"])\n'
              'unused = dict(\n', code="GC103"),
    Plant("nbow-vocab-all-splits", NLP, NBOW, cell=35, old='    train_data["tokens"],\n',
          new='    train_data["tokens"] + valid_data["tokens"] + test_data["tokens"],\n', code="GC103"),
    Plant("nbow-counter-all-splits", NLP, NBOW, cell=35, old="min_freq = 5\n",
          new="min_freq = 5\ncounter = collections.Counter()\n"
              'for tokens in train_data["tokens"] + valid_data["tokens"] + test_data["tokens"]:\n'
              "    counter.update(tokens)\n", code="GC103"),
    # --- GC301: GradScaler under bf16, scaler switched by a flag ---------------------------------------------
    Plant("yolov5-bf16-flag-scaler", Y5, "train.py", "            with smart_amp_autocast(amp):\n",
          "            with torch.autocast('cuda', dtype=torch.bfloat16, enabled=amp):\n", "GC301"),
    Plant("mingpt-ddp-bf16", EX, "distributed/minGPT-ddp/mingpt/trainer.py",
          "dtype=torch.float16, enabled=(self.config.use_amp)", "dtype=torch.bfloat16, enabled=(self.config.use_amp)",
          "GC301"),
    # --- GC201: DistributedSampler without set_epoch -------------------------------------------------------
    Plant("imagenet-no-set-epoch", EX, "imagenet/main.py", "            train_sampler.set_epoch(epoch)\n",
          "            pass\n", "GC201"),
    Plant("mae-no-set-epoch", MAE, "main_finetune.py", "            data_loader_train.sampler.set_epoch(epoch)\n",
          "            pass\n", "GC201"),
    Plant("dino-linear-no-set-epoch", DINO, "eval_linear.py", "        train_loader.sampler.set_epoch(epoch)\n",
          "", "GC201"),
    # --- loaders, seeds, step hygiene ---------------------------------------------------------------------
    Plant("mnist-test-shuffle", EX, "mnist/main.py", "DataLoader(dataset2, **test_kwargs)",
          "DataLoader(dataset2, shuffle=True, **test_kwargs)", "GC502"),
    Plant("dino-val-drop-last", DINO, "eval_linear.py", "    val_loader = torch.utils.data.DataLoader(\n",
          "    val_loader = torch.utils.data.DataLoader(drop_last=True, dataset=\n", "GC501"),
    Plant("mnist-no-seed", EX, "mnist/main.py", "    torch.manual_seed(args.seed)\n", "", "GC601"),
    Plant("siamese-no-seed", EX, "siamese_network/main.py", "    torch.manual_seed(args.seed)\n", "", "GC601"),
    Plant("mnist-no-zero-grad", EX, "mnist/main.py", "        optimizer.zero_grad()\n", "", "GC803"),
    Plant("imagenet-no-zero-grad", EX, "imagenet/main.py", "        optimizer.zero_grad()\n", "", "GC803"),
    Plant("mae-no-zero-grad", MAE, "engine_finetune.py", "            optimizer.zero_grad()\n", "            pass\n",
          "GC803"),
    Plant("super-resolution-loss-graph", EX, "super_resolution/main.py", "epoch_loss += loss.item()",
          "epoch_loss += loss", "GC802"),
    Plant("imagenet-benchmark-deterministic", EX, "imagenet/main.py", "        cudnn.benchmark = False\n",
          "        cudnn.benchmark = True\n", "GC603"),
)
