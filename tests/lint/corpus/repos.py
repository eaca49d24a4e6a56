"""The real-code corpus: upstream training codebases, pinned (none of the projects the lint issue measured).

Fetched snapshots are never committed: ``run.py`` reads them from a folder holding one sub-folder per
repository (``owner+name``, the tree at the pinned commit). Two are notebook collections (d2l's PyTorch
Colab notebooks, bentrevett's sentiment-analysis tutorials).
"""
from __future__ import annotations

#: folder name -> (GitHub repository, commit)
REPOS: dict[str, tuple[str, str]] = {
    "pytorch+examples": ("pytorch/examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8"),
    "karpathy+minGPT": ("karpathy/minGPT", "37baab71b9abea1b76ab957409a1cc2fbfba8a26"),
    "facebookresearch+dino": ("facebookresearch/dino", "7c446df5b9f45747937fb0d72314eb9f7b66930a"),
    "facebookresearch+dinov2": ("facebookresearch/dinov2", "b8931f7bf91576930313be2c6d6af376033b35f0"),
    "facebookresearch+mae": ("facebookresearch/mae", "efb2a8062c206524e35e47d04501ed4f544c0ae8"),
    "facebookresearch+deit": ("facebookresearch/deit", "7e160fe43f0252d17191b71cbb5826254114ea5b"),
    "facebookresearch+detr": ("facebookresearch/detr", "29901c51d7fe8712168b8d0d64351170bc0f83e0"),
    "facebookresearch+swav": ("facebookresearch/swav", "06b1b7cbaf6ba2a792300d79c7299db98b93b7f9"),
    "facebookresearch+barlowtwins": ("facebookresearch/barlowtwins", "8e8d284ca0bc02f88b92328e53f9b901e86b4a3c"),
    "facebookresearch+simsiam": ("facebookresearch/simsiam", "a7bc1772896d0dad0806c51f0bb6f3b16d290468"),
    "ultralytics+yolov5": ("ultralytics/yolov5", "5081342f04fb287fc2e5f2b5a4e06752b7937b1c"),
    "WongKinYiu+yolov7": ("WongKinYiu/yolov7", "a207844b1ce82d204ab36d87d496728d3d2348e7"),
    "lucidrains+denoising-diffusion-pytorch": ("lucidrains/denoising-diffusion-pytorch",
                                               "faed4db28e724735323fa91c70aa9b28a6e1cbac"),
    "openai+improved-diffusion": ("openai/improved-diffusion", "1bc7bbbdc414d83d4abf2ad8cc1446dc36c4e4d5"),
    "openai+guided-diffusion": ("openai/guided-diffusion", "22e0df8183507e13a7813f8d38d51b072ca1e67c"),
    "rosinality+stylegan2-pytorch": ("rosinality/stylegan2-pytorch", "bef283a1c24087da704d16c30abc8e36e63efa0e"),
    "eriklindernoren+PyTorch-GAN": ("eriklindernoren/PyTorch-GAN", "36d3c77e5ff20ebe0aeefd322326a134a279b93e"),
    "kuangliu+pytorch-cifar": ("kuangliu/pytorch-cifar", "49b7aa97b0c12fe0d4054e670403a16b6b834ddd"),
    "yunjey+pytorch-tutorial": ("yunjey/pytorch-tutorial", "0500d3df5a2a8080ccfccbc00aca0eacc21818db"),
    "d2l-ai+d2l-pytorch-colab": ("d2l-ai/d2l-pytorch-colab", "f8543710a7046a947464f0fa3ad0f8619d7613d3"),
    "bentrevett+pytorch-sentiment-analysis": ("bentrevett/pytorch-sentiment-analysis",
                                              "329f654b2cfaed22fee432569ebd7a2674584f79"),
}
